//! Running out of local ports fails the connect with the `io::ErrorKind`
//! tokio users expect, at once, instead of hanging the stack.

use std::sync::Arc;
use std::time::Duration;

use mptun::{Limits, MptcpListener, MptcpStream, Stack};
use mptun_io::{ChannelIo, PacketIo};
use tokio::time::timeout;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_ports_give_addr_not_available_not_a_hang() {
    let (a, b) = ChannelIo::pair("a", "b", 1500, 4096);
    let (a, b): (Arc<dyn PacketIo>, Arc<dyn PacketIo>) = (Arc::new(a), Arc::new(b));
    let limits = Limits { local_port_range: 40000..=40002, ..Limits::default() };
    let sa = Stack::builder().path("10.0.0.1".parse().unwrap(), a).limits(limits).build().unwrap();
    let sb = Stack::builder().path("10.0.0.2".parse().unwrap(), b).build().unwrap();
    let listener = MptcpListener::bind(&sb, "10.0.0.2:5000").await.unwrap();
    let server = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let mut streams = Vec::new();
    for _ in 0..3 {
        let s = timeout(Duration::from_secs(10), MptcpStream::connect(&sa, "10.0.0.2:5000")).await.unwrap().unwrap();
        streams.push(s);
    }
    let err = timeout(Duration::from_secs(10), MptcpStream::connect(&sa, "10.0.0.2:5000"))
        .await
        .expect("a full port range must fail the connect, not hang it")
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrNotAvailable, "{err}");
    drop(streams);
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_a_pair_in_use_gives_addr_in_use() {
    let (a, b) = ChannelIo::pair("a", "b", 1500, 4096);
    let (a, b): (Arc<dyn PacketIo>, Arc<dyn PacketIo>) = (Arc::new(a), Arc::new(b));
    let sa = Stack::builder().path("10.0.0.1".parse().unwrap(), a).build().unwrap();
    let sb = Stack::builder().path("10.0.0.2".parse().unwrap(), b).build().unwrap();
    let listener = MptcpListener::bind(&sb, "10.0.0.2:5000").await.unwrap();
    let server = tokio::spawn(async move { listener.accept().await.map(|(s, _)| s) });
    let opts = sa.stream_options().bind("10.0.0.1:40000".parse().unwrap());
    let first = timeout(Duration::from_secs(10), MptcpStream::connect_with(&sa, "10.0.0.2:5000", opts.clone()))
        .await
        .unwrap()
        .unwrap();
    let err = timeout(Duration::from_secs(10), MptcpStream::connect_with(&sa, "10.0.0.2:5000", opts))
        .await
        .expect("refused at once")
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse, "{err}");
    drop(first);
    server.abort();
}
