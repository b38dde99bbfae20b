//! A minimal echo server on mptun: every connection (MPTCP, or plain TCP
//! from a peer that does not speak it) gets its bytes back.
//!
//! ```text
//! sudo netns-scripts/topo.sh up --prefix mpt --octet 77 --paths 2
//! sudo cargo run -p mptun --example echo_server -- --netns mpt-cli \
//!     --path tun1,10.77.101.1/24,10.77.101.2 --listen 0.0.0.0:7 [--pcap /tmp/echo.pcap]
//! # a kernel MPTCP client from the other namespace:
//! sudo ip netns exec mpt-srv mptcpize run ncat 10.77.101.2 7
//! ```
//!
//! `--path TUN,TUN_ADDR/PREFIX,MPTUN_ADDR` may be repeated (one TUN per
//! path); the same TUN name twice puts several paths on one device.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use mptun::{MptcpListener, Stack};
use mptun_io::{IfAddr, PacketIo, TunConfig, TunDevice};

struct Args {
    netns: Option<String>,
    paths: Vec<(String, IfAddr, IpAddr)>,
    listen: SocketAddr,
    pcap: Option<String>,
}

fn parse() -> io::Result<Args> {
    let bad = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
    let mut a = Args { netns: None, paths: Vec::new(), listen: "0.0.0.0:7".parse().unwrap(), pcap: None };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| bad(format!("{flag} needs a value")));
        match flag.as_str() {
            "--netns" => a.netns = Some(val()?),
            "--listen" => a.listen = val()?.parse().map_err(|e| bad(format!("--listen: {e}")))?,
            "--pcap" => a.pcap = Some(val()?),
            "--path" => {
                let v = val()?;
                let parts: Vec<&str> = v.split(',').collect();
                let [tun, tun_addr, addr] = parts[..] else {
                    return Err(bad(format!("--path {v}: want TUN,TUN_ADDR/PREFIX,MPTUN_ADDR")));
                };
                let addr = addr.parse().map_err(|e| bad(format!("{addr}: {e}")))?;
                a.paths.push((tun.to_owned(), tun_addr.parse()?, addr));
            }
            _ => return Err(bad(format!("unknown argument {flag}"))),
        }
    }
    if a.paths.is_empty() {
        return Err(bad("at least one --path TUN,TUN_ADDR/PREFIX,MPTUN_ADDR".into()));
    }
    Ok(a)
}

/// Creates the TUN devices (one per distinct name) and the stack over them.
fn build_stack(args: &Args) -> io::Result<Stack> {
    let mut cfgs: Vec<(String, TunConfig)> = Vec::new();
    for (tun, tun_addr, _) in &args.paths {
        match cfgs.iter_mut().find(|(n, _)| n == tun) {
            Some((_, c)) => c.addresses.push(*tun_addr),
            None => cfgs.push((tun.clone(), TunConfig::new(tun).address(tun_addr.addr, tun_addr.prefix)?)),
        }
    }
    let mut devs: HashMap<String, Arc<dyn PacketIo>> = HashMap::new();
    for (name, cfg) in cfgs {
        let dev = match &args.netns {
            Some(ns) => mptun_io::spawn_tun_in_netns(ns, &cfg)?,
            None => TunDevice::create(&cfg)?,
        };
        devs.insert(name, Arc::new(dev));
    }
    let mut b = Stack::builder();
    for (tun, _, addr) in &args.paths {
        b = b.path(*addr, devs[tun].clone());
    }
    if let Some(p) = &args.pcap {
        b = b.pcap(p);
    }
    b.build()
}

#[tokio::main]
async fn main() -> io::Result<()> {
    let args = parse()?;
    let stack = build_stack(&args)?;
    let listener = MptcpListener::bind(&stack, args.listen).await?;
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
    Ok(())
}
