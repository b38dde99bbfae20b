//! A minimal echo client on mptun: sends a message, reads the echo, prints
//! it with the connection's subflows (TCP_INFO-like figures).
//!
//! ```text
//! sudo netns-scripts/topo.sh up --prefix mpt --octet 77 --paths 2 --kernel-mptcp
//! sudo ip netns exec mpt-srv mptcpize run ncat -l -k 10.77.1.2 7 -e /bin/cat &
//! sudo cargo run -p mptun --example echo_client -- --netns mpt-cli \
//!     --path tun1,10.77.101.1/24,10.77.101.2 --path tun2,10.77.102.1/24,10.77.102.2 \
//!     --connect 10.77.1.2:7 --message "hello over two paths"
//! ```
//!
//! With two `--path`s the second becomes an MPTCP `subflow` endpoint: once
//! the connection is MPTCP, a subflow joins from it over path 2.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use mptun::{MptcpStream, Stack};
use mptun_io::{IfAddr, PacketIo, TunConfig, TunDevice};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::main]
async fn main() -> io::Result<()> {
    let bad = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
    let (mut netns, mut paths, mut connect, mut message) = (None, Vec::new(), None, "hello".to_owned());
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| bad(format!("{flag} needs a value")));
        match flag.as_str() {
            "--netns" => netns = Some(val()?),
            "--connect" => connect = Some(val()?.parse::<SocketAddr>().map_err(|e| bad(e.to_string()))?),
            "--message" => message = val()?,
            "--path" => {
                let v = val()?;
                let parts: Vec<&str> = v.split(',').collect();
                let [tun, tun_addr, addr] = parts[..] else { return Err(bad(format!("--path {v}"))) };
                let tun_addr: IfAddr = tun_addr.parse()?;
                let addr: IpAddr = addr.parse().map_err(|e| bad(format!("{addr}: {e}")))?;
                paths.push((tun.to_owned(), tun_addr, addr));
            }
            _ => return Err(bad(format!("unknown argument {flag}"))),
        }
    }
    let connect = connect.ok_or_else(|| bad("--connect ADDR:PORT is required".into()))?;
    if paths.is_empty() {
        return Err(bad("at least one --path TUN,TUN_ADDR/PREFIX,MPTUN_ADDR".into()));
    }

    // One TUN per path here.
    let mut b = Stack::builder();
    for (tun, tun_addr, addr) in &paths {
        let cfg = TunConfig::new(tun).address(tun_addr.addr, tun_addr.prefix)?;
        let dev = match &netns {
            Some(ns) => mptun_io::spawn_tun_in_netns(ns, &cfg)?,
            None => TunDevice::create(&cfg)?,
        };
        b = b.path(*addr, Arc::new(dev) as Arc<dyn PacketIo>);
    }
    let stack = b.build()?;

    let mut s = MptcpStream::connect(&stack, connect).await?;
    s.write_all(message.as_bytes()).await?;
    let mut echo = vec![0u8; message.len()];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut echo))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no echo within 10 s"))??;
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
    s.shutdown().await?;
    Ok(())
}
