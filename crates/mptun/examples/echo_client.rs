//! A minimal echo client on mptun: sends a message, reads the echo, prints
//! it with the connection's subflows (TCP_INFO-like figures).
//!
//! ```text
//! sudo netns-scripts/topo.sh up --prefix mpt --octet 77 --paths 2 --kernel-mptcp
//! sudo ip netns exec mpt-srv mptcpize run ncat -l -k 10.77.1.2 7 -e /bin/cat &
//! sudo cargo run -p mptun --example echo_client -- --netns mpt-cli \
//!     --path dev=tun1,addr=10.77.101.2/24 --path dev=tun2,addr=10.77.102.2/24 \
//!     --connect 10.77.1.2:7 --message "hello over two paths"
//! ```
//!
//! `--path` is `mptun send`'s (`dev=NAME,addr=A[/PREFIX][,peer=KERNEL_ADDR]
//! [,mtu=M][,signal][,subflow][,backup]`): every path is a `subflow`
//! endpoint unless it names its flags, so once the connection is MPTCP a
//! subflow joins from the second path.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

mod common;
use mptun::MptcpStream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends a message over mptun and prints the echo and the subflows.
#[derive(Parser)]
struct Args {
    #[command(flatten)]
    paths: common::Paths,
    /// The echo server.
    #[arg(long, value_name = "ADDR:PORT")]
    connect: SocketAddr,
    /// What to send.
    #[arg(long, default_value = "hello")]
    message: String,
}

async fn run(a: Args) -> std::io::Result<()> {
    let stack = a.paths.stack()?.build()?;

    let mut s = MptcpStream::connect(&stack, a.connect).await?;
    s.write_all(a.message.as_bytes()).await?;
    let mut echo = vec![0u8; a.message.len()];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut echo))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no echo within 10 s"))??;
    println!("echo: {}", String::from_utf8_lossy(&echo));
    // Give a join time to happen, then show what the connection looks like.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let info = s.info()?;
    println!("{} -> {} ({})", info.local, info.remote, if info.is_mptcp() { "MPTCP" } else { "plain TCP" });
    for sf in &info.conn.subflows {
        let t = &sf.tcp;
        println!(
            "  subflow {} -> {}: cwnd {} srtt {:?} pacing {} B/s sent {} B retrans {} B",
            sf.local, sf.remote, t.cwnd, t.srtt, t.pacing_rate, t.bytes_sent, t.bytes_retrans
        );
    }
    s.shutdown().await
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("echo_client: {e}");
            ExitCode::FAILURE
        }
    }
}
