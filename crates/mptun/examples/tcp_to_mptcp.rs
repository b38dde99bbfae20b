//! Switching an application from `tokio::net::TcpStream` to mptun is a
//! one-line change: the stream types share the tokio traits
//! (`AsyncRead` + `AsyncWrite`, `into_split`, `local_addr`, `peer_addr`,
//! `set_nodelay`), so the application code below is generic and unchanged.
//!
//! ```diff
//! - let stream = tokio::net::TcpStream::connect(addr).await?;
//! + let stream = mptun::MptcpStream::connect(&stack, addr).await?;
//! ```
//!
//! Runs without root: the kernel half talks over loopback, the mptun half
//! over an in-memory link between two stacks (`cargo run -p mptun
//! --example tcp_to_mptcp`). Over real paths the stack is built on TUN
//! devices instead; see the echo examples.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use mptun::{MptcpListener, MptcpStream, Stack};
use mptun_io::{ChannelIo, PacketIo};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The application: a request/response exchange over any stream.
async fn app<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S) -> io::Result<String> {
    stream.write_all(b"GET / HTTP/1.0\r\n\r\n").await?;
    stream.shutdown().await?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await?;
    Ok(reply)
}

/// A toy server answering every request with a fixed line.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut s: S) -> io::Result<()> {
    let mut req = Vec::new();
    s.read_to_end(&mut req).await?;
    s.write_all(format!("HTTP/1.0 200 OK\r\n\r\nyou sent {} bytes\n", req.len()).as_bytes()).await?;
    s.shutdown().await
}

async fn run() -> io::Result<()> {
    // 1. Kernel TCP.
    let kl = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = kl.local_addr()?;
    tokio::spawn(async move { serve(kl.accept().await?.0).await });
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    println!("tokio TcpStream: {:?}", app(stream).await?);

    // 2. mptun: two stacks joined by an in-memory link.
    let (a, b) = ChannelIo::pair("a", "b", 1500, 1024);
    let client = Stack::builder().path("10.9.0.1".parse().unwrap(), Arc::new(a) as Arc<dyn PacketIo>).build()?;
    let server = Stack::builder().path("10.9.0.2".parse().unwrap(), Arc::new(b) as Arc<dyn PacketIo>).build()?;
    let ml = MptcpListener::bind(&server, "10.9.0.2:80").await?;
    tokio::spawn(async move { serve(ml.accept().await?.0).await });
    let addr: SocketAddr = "10.9.0.2:80".parse().unwrap();

    let stream = MptcpStream::connect(&client, addr).await?; // <- the one changed line
    stream.set_nodelay(true)?;
    let mode = if stream.info()?.is_mptcp() { "MPTCP" } else { "TCP" };
    println!("mptun MptcpStream ({mode}): {:?}", app(stream).await?);
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tcp_to_mptcp: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
