//! A minimal echo server on mptun: every connection (MPTCP, or plain TCP
//! from a peer that does not speak it) gets its bytes back.
//!
//! ```text
//! sudo netns-scripts/topo.sh up --prefix mpt --octet 77 --paths 2
//! sudo cargo run -p mptun --example echo_server -- --netns mpt-cli \
//!     --path dev=tun1,addr=10.77.101.2/24 --listen 0.0.0.0:7 [--pcap /tmp/echo.pcap]
//! # a kernel MPTCP client from the other namespace:
//! sudo ip netns exec mpt-srv mptcpize run ncat 10.77.101.2 7
//! ```
//!
//! `--path` is `mptun serve --path`'s and may be repeated; the same `dev`
//! twice puts several paths on one TUN, `signal` announces a path's
//! address to clients (ADD_ADDR).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

mod common;
use mptun::{MptcpListener, Stack};

/// Echoes every connection's bytes back, over mptun.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    paths: common::Paths,
    /// Address and port to listen on.
    #[arg(long, default_value = "0.0.0.0:7")]
    listen: SocketAddr,
    /// Record the stack's packets into this pcap file.
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
}

/// Creates the TUN devices and the stack over them.
fn build_stack(a: &Args) -> std::io::Result<Stack> {
    let mut b = a.paths.stack()?;
    if let Some(p) = &a.pcap {
        b = b.pcap(p);
    }
    b.build()
}

async fn run(a: Args) -> std::io::Result<()> {
    let stack = build_stack(&a)?;
    let listener = MptcpListener::bind(&stack, a.listen).await?;
    println!("echo server on {} (paths {:?})", listener.local_addr()?, stack.paths());
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => r?,
            _ = tokio::signal::ctrl_c() => break,
        };
        let mode = if stream.info()?.is_mptcp() { "MPTCP" } else { "TCP" };
        println!("{peer}: connected ({mode})");
        tokio::spawn(async move {
            let (mut r, mut w) = stream.into_split();
            match tokio::io::copy(&mut r, &mut w).await {
                Ok(n) => println!("{peer}: echoed {n} bytes"),
                Err(e) => println!("{peer}: {e}"),
            }
        });
    }
    print!("{}", stack.counters().to_nstat());
    // Resets the connections still open and waits until the capture is
    // complete on disk, rather than leaving both to the runtime's teardown.
    drop(listener);
    stack.shutdown().await;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("echo_server: {e}");
            ExitCode::FAILURE
        }
    }
}
