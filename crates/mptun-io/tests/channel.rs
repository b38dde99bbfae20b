//! The in-memory pair through the PacketIo trait: no root needed.

use std::sync::Arc;
use std::time::Duration;

use mptun_io::{ChannelIo, IoStats, PacketIo, PacketIoExt, PcapReader, PcapTap, RxBatch, TxBatch, TxPacket};

fn pkt(i: u8, len: usize) -> Vec<u8> {
    let mut p = vec![0x45; len];
    p[1] = i;
    p
}

#[tokio::test]
async fn batches_cross_in_order() {
    let (a, b) = ChannelIo::pair("a", "b", 1500, 64);
    let mut out = TxBatch::new(16, 1500);
    for i in 0..10 {
        out.push(&mut TxPacket::copy_of(&pkt(i, 100 + usize::from(i)))).unwrap();
    }
    assert_eq!(a.send_batch(&mut out).await.unwrap(), 10);
    assert!(out.is_empty(), "a finished send clears the batch");
    let mut inb = RxBatch::new(4, 1500);
    // A batch of 4 slots takes 4, then the rest on the next calls.
    assert_eq!(b.recv_batch(&mut inb).await.unwrap(), 4);
    assert_eq!(inb.get(3).unwrap(), pkt(3, 103).as_slice());
    inb.clear();
    assert_eq!(b.recv_batch(&mut inb).await.unwrap(), 4);
    inb.clear();
    assert_eq!(b.recv_batch(&mut inb).await.unwrap(), 2);
    assert_eq!(inb.iter().map(|p| p[1]).collect::<Vec<_>>(), vec![8, 9]);
    let s: IoStats = b.stats();
    assert_eq!((s.rx_packets, s.rx_wakeups), (10, 3));
    assert_eq!(a.stats().tx_packets, 10);
}

#[tokio::test]
async fn full_queue_backpressures_then_drains() {
    let (a, b) = ChannelIo::pair("a", "b", 1500, 4);
    let a = Arc::new(a);
    let mut out = TxBatch::new(10, 1500);
    for i in 0..10 {
        out.push(&mut TxPacket::copy_of(&pkt(i, 60))).unwrap();
    }
    let sender = tokio::spawn({
        let a = a.clone();
        async move { a.send_batch(&mut out).await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(a.in_flight(), 4, "sender waits at the queue bound");
    let mut got = Vec::new();
    let mut inb = RxBatch::new(8, 1500);
    while got.len() < 10 {
        inb.clear();
        tokio::time::timeout(Duration::from_secs(5), b.recv_batch(&mut inb)).await.unwrap().unwrap();
        got.extend(inb.iter().map(|p| p[1]));
    }
    assert_eq!(got, (0..10).collect::<Vec<u8>>());
    assert_eq!(sender.await.unwrap().unwrap(), 10);
}

#[tokio::test]
async fn oversize_packets_are_dropped_not_fatal() {
    let (a, b) = ChannelIo::pair("a", "b", 100, 8);
    let mut out = TxBatch::new(4, 200);
    out.push(&mut TxPacket::copy_of(&pkt(1, 50))).unwrap();
    out.push(&mut TxPacket::copy_of(&pkt(2, 150))).unwrap(); // over the 100-byte MTU
    out.push(&mut TxPacket::copy_of(&pkt(3, 60))).unwrap();
    assert_eq!(a.send_batch(&mut out).await.unwrap(), 2);
    assert_eq!(a.stats().tx_errors, 1);
    assert!(a.send(&pkt(4, 101)).await.is_err());
    let mut inb = RxBatch::new(8, 100);
    b.recv_batch(&mut inb).await.unwrap();
    assert_eq!(inb.iter().map(|p| p[1]).collect::<Vec<_>>(), vec![1, 3]);
}

#[tokio::test]
async fn dropping_one_end_ends_the_other() {
    let (a, b) = ChannelIo::pair("a", "b", 1500, 8);
    a.send(&pkt(1, 40)).await.unwrap();
    drop(a);
    let mut inb = RxBatch::new(8, 1500);
    // Queued packets are still delivered, then EOF.
    assert_eq!(b.recv_batch(&mut inb).await.unwrap(), 1);
    let e = b.recv_batch(&mut inb).await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    assert_eq!(b.send(&pkt(2, 40)).await.unwrap_err().kind(), std::io::ErrorKind::BrokenPipe);
}

#[tokio::test]
async fn receive_into_full_batch_is_an_error_not_a_spin() {
    let (a, b) = ChannelIo::pair("a", "b", 1500, 8);
    a.send(&pkt(1, 40)).await.unwrap();
    let mut inb = RxBatch::new(1, 1500);
    inb.receive(&pkt(9, 40)).unwrap();
    assert_eq!(b.recv_batch(&mut inb).await.unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
}

#[tokio::test]
async fn steady_state_reuses_packet_buffers() {
    // The batch's slots keep their addresses across clear(): no allocation per packet.
    let (a, b) = ChannelIo::pair("a", "b", 1500, 8);
    let mut out = TxBatch::new(4, 1500);
    let mut inb = RxBatch::new(4, 1500);
    let mut first_ptr = None;
    for round in 0..100u8 {
        out.push(&mut TxPacket::copy_of(&pkt(round, 1000))).unwrap();
        a.send_batch(&mut out).await.unwrap();
        inb.clear();
        b.recv_batch(&mut inb).await.unwrap();
        let p = inb.get(0).unwrap().as_ptr();
        assert_eq!(*first_ptr.get_or_insert(p), p);
    }
}

#[tokio::test]
async fn pcap_tap_records_both_directions() {
    let dir = std::env::temp_dir().join(format!("mptun-io-tap-{}.pcap", std::process::id()));
    let (a, b) = ChannelIo::pair("a", "b", 1500, 8);
    let a = PcapTap::create(a, &dir).unwrap();
    let mut out = TxBatch::new(4, 1500);
    out.push(&mut TxPacket::copy_of(&pkt(1, 40))).unwrap();
    out.push(&mut TxPacket::copy_of(&pkt(2, 41))).unwrap();
    a.send_batch(&mut out).await.unwrap();
    b.send(&pkt(3, 42)).await.unwrap();
    let mut inb = RxBatch::new(4, 1500);
    a.recv_batch(&mut inb).await.unwrap();
    a.flush().unwrap();
    let recs: Vec<_> = PcapReader::open(&dir).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(recs.iter().map(|r| (r.data[1], r.data.len())).collect::<Vec<_>>(), vec![(1, 40), (2, 41), (3, 42)]);
    assert!(recs.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    assert!(now - recs[0].ts_ns < 60_000_000_000, "wall-clock timestamps");
    std::fs::remove_file(&dir).ok();
}

#[tokio::test]
async fn works_as_trait_object() {
    let (a, b) = ChannelIo::pair("a", "b", 1500, 8);
    let devs: Vec<Arc<dyn PacketIo>> = vec![Arc::new(a), Arc::new(b)];
    devs[0].send(&pkt(7, 40)).await.unwrap();
    let mut inb = RxBatch::for_io(devs[1].as_ref());
    assert_eq!(devs[1].recv_batch(&mut inb).await.unwrap(), 1);
    assert_eq!(devs[1].name(), "b");
}
