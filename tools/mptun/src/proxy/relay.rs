//! Relaying one proxied connection: two copy loops, one per direction,
//! each through one fixed buffer, so a slow side holds back the fast one
//! (backpressure: nothing is read that cannot be written) and a connection
//! costs at most two buffers beyond the sockets' own. A side's end of
//! stream becomes a shutdown of the other side's write direction (FIN,
//! DATA_FIN under MPTCP) while the other direction goes on: half-close is
//! preserved.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Bytes each copy loop holds at most.
pub(crate) const BUF: usize = 64 * 1024;

/// Which end of a relay a failure came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// The side that opened the connection (the application at the local
    /// proxy, the local proxy at the exit).
    Near,
    /// The side connected to (the exit at the local proxy, the destination
    /// at the exit).
    Far,
}

/// How a relay ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Both directions ended with a FIN.
    Closed,
    /// One end failed (reset, or a write to it failed).
    Failed(End, io::Error),
}

/// Bytes moved so far, readable while the relay runs (for the periodic
/// summary).
#[derive(Debug, Default)]
pub(crate) struct Moved {
    /// Near to far.
    pub(crate) up: AtomicU64,
    /// Far to near.
    pub(crate) down: AtomicU64,
}

/// Copies `from` into `to` until `from` ends, then shuts `to`'s write
/// direction down. An error says which of the two ends failed.
async fn pump<R, W>(from: &mut R, to: &mut W, counter: &AtomicU64, from_end: End) -> Result<(), (End, io::Error)>
where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    let to_end = if from_end == End::Near { End::Far } else { End::Near };
    let mut buf = vec![0u8; BUF];
    loop {
        let n = from.read(&mut buf).await.map_err(|e| (from_end, e))?;
        if n == 0 {
            return to.shutdown().await.map_err(|e| (to_end, e));
        }
        to.write_all(&buf[..n]).await.map_err(|e| (to_end, e))?;
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Makes closing `s` send a RST (SO_LINGER 0, which never blocks): an
/// aborted relay is passed on as an abort, not as an orderly end of stream.
pub(crate) fn reset_on_drop(s: &tokio::net::TcpStream) {
    socket2::SockRef::from(s).set_linger(Some(std::time::Duration::ZERO)).ok();
}

/// Relays between the near end's halves and the far end's halves until
/// both directions have ended, or one end fails (then at once: the caller
/// drops both connections).
pub(crate) async fn relay<NR, NW, FR, FW>(near: (&mut NR, &mut NW), far: (&mut FR, &mut FW), moved: &Moved) -> Outcome
where
    NR: AsyncRead + Unpin + ?Sized,
    NW: AsyncWrite + Unpin + ?Sized,
    FR: AsyncRead + Unpin + ?Sized,
    FW: AsyncWrite + Unpin + ?Sized,
{
    let up = pump(near.0, far.1, &moved.up, End::Near);
    let down = pump(far.0, near.1, &moved.down, End::Far);
    match tokio::try_join!(up, down) {
        Ok(((), ())) => Outcome::Closed,
        Err((end, e)) => Outcome::Failed(end, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn both_directions_half_close_and_backpressure() {
        // near app <-> (a0 | a1) relay (b0 | b1) <-> far app; duplex pipes
        // of 1 KiB stand in for slow sockets.
        let (mut app, a1) = tokio::io::duplex(1024);
        let (b0, mut far) = tokio::io::duplex(1024);
        let moved = std::sync::Arc::new(Moved::default());
        let m2 = moved.clone();
        let task = tokio::spawn(async move {
            let (mut ar, mut aw) = tokio::io::split(a1);
            let (mut br, mut bw) = tokio::io::split(b0);
            relay((&mut ar, &mut aw), (&mut br, &mut bw), &m2).await
        });
        let up: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
        let writer = {
            let up = up.clone();
            async move {
                app.write_all(&up).await.unwrap();
                app.shutdown().await.unwrap(); // half-close: app still reads
                let mut back = Vec::new();
                app.read_to_end(&mut back).await.unwrap();
                back
            }
        };
        let server = async move {
            let mut got = Vec::new();
            far.read_to_end(&mut got).await.unwrap(); // sees the FIN
            far.write_all(b"reply after the client's FIN").await.unwrap();
            far.shutdown().await.unwrap();
            got
        };
        let (back, got) = tokio::join!(writer, server);
        assert!(got == up, "upstream bytes intact");
        assert_eq!(back, b"reply after the client's FIN");
        assert!(matches!(task.await.unwrap(), Outcome::Closed));
        assert_eq!(moved.up.load(Ordering::Relaxed), up.len() as u64);
        assert_eq!(moved.down.load(Ordering::Relaxed), 28);
    }

    #[tokio::test]
    async fn a_stalled_reader_stops_the_relay_reading() {
        let (mut app, a1) = tokio::io::duplex(1024);
        let (b0, _far) = tokio::io::duplex(1024); // never read
        let moved = std::sync::Arc::new(Moved::default());
        let m2 = moved.clone();
        tokio::spawn(async move {
            let (mut ar, mut aw) = tokio::io::split(a1);
            let (mut br, mut bw) = tokio::io::split(b0);
            relay((&mut ar, &mut aw), (&mut br, &mut bw), &m2).await
        });
        let junk = vec![1u8; 1 << 20];
        let r = tokio::time::timeout(std::time::Duration::from_millis(300), app.write_all(&junk)).await;
        assert!(r.is_err(), "the writer must block: the relay buffers a bounded amount");
        let held = moved.up.load(Ordering::Relaxed);
        assert!(held <= 1024 + BUF as u64, "forwarded {held} into a 1 KiB pipe");
    }

    #[tokio::test]
    async fn a_failing_end_is_named() {
        let (app, a1) = tokio::io::duplex(1024);
        let (b0, far) = tokio::io::duplex(1024);
        drop(far);
        let moved = Moved::default();
        let (mut ar, mut aw) = tokio::io::split(a1);
        let (mut br, mut bw) = tokio::io::split(b0);
        let mut app = app;
        app.write_all(b"x").await.unwrap();
        let out = relay((&mut ar, &mut aw), (&mut br, &mut bw), &moved).await;
        assert!(matches!(out, Outcome::Failed(End::Far, _)), "{out:?}");
    }
}
