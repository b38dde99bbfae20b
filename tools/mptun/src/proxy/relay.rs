//! Relaying one proxied connection: two copy loops, one per direction,
//! each through one fixed buffer, so a slow side holds back the fast one
//! (backpressure: nothing is read that cannot be written) and a connection
//! costs at most two buffers beyond the sockets' own. A side's end of
//! stream becomes a shutdown of the other side's write direction (FIN,
//! DATA_FIN under MPTCP) while the other direction goes on: half-close is
//! preserved. A relay on which nothing moves for the idle timeout ends,
//! so a destination that never answers, a dead peer or a half-closed
//! direction that never finishes does not hold its slot and buffers for
//! good.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

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
    /// No byte moved either way for this long.
    Idle(Duration),
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

/// When a byte last moved on a relay, in either direction.
struct Activity {
    start: Instant,
    /// Milliseconds after `start`.
    last_ms: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        self.last_ms.store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Returns once nothing has moved for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let due = self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed)) + idle;
            if Instant::now() >= due {
                return;
            }
            tokio::time::sleep_until(due).await;
        }
    }
}

/// Copies `from` into `to` until `from` ends, then shuts `to`'s write
/// direction down. An error says which of the two ends failed. Every read
/// and every partial write counts as activity, so a slow but moving
/// destination is not idle.
async fn pump<R, W>(
    from: &mut R,
    to: &mut W,
    counter: &AtomicU64,
    from_end: End,
    activity: &Activity,
) -> Result<(), (End, io::Error)>
where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    let to_end = if from_end == End::Near { End::Far } else { End::Near };
    let mut buf = vec![0u8; BUF];
    loop {
        let n = from.read(&mut buf).await.map_err(|e| (from_end, e))?;
        activity.touch();
        if n == 0 {
            return to.shutdown().await.map_err(|e| (to_end, e));
        }
        let mut off = 0;
        while off < n {
            let w = to.write(&buf[off..n]).await.map_err(|e| (to_end, e))?;
            if w == 0 {
                return Err((to_end, io::ErrorKind::WriteZero.into()));
            }
            off += w;
            counter.fetch_add(w as u64, Ordering::Relaxed);
            activity.touch();
        }
    }
}

/// Turns TCP keepalive on for a kernel socket of a relay: a peer that
/// vanished (host down, NAT state lost) is found after about two minutes
/// of silence rather than never.
pub(crate) fn keepalive(s: &tokio::net::TcpStream) {
    let ka = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(60))
        .with_interval(Duration::from_secs(10))
        .with_retries(6);
    socket2::SockRef::from(s).set_tcp_keepalive(&ka).ok();
}

/// For a connection whose peer owes nothing yet (waiting to be admitted,
/// or for our connect out): returns why, once the peer closed or reset it.
/// Bytes that arrive early are kept in `early`, for the relay to pass on
/// first; after them the peer is known to be there and this waits forever.
pub(crate) async fn gone<R: AsyncRead + Unpin + ?Sized>(r: &mut R, early: &mut Vec<u8>) -> String {
    if early.is_empty() {
        let mut b = [0u8; 2048];
        match r.read(&mut b).await {
            Ok(0) => return "it closed the connection".into(),
            Ok(n) => early.extend_from_slice(&b[..n]),
            Err(e) => return e.to_string(),
        }
    }
    std::future::pending().await
}

/// Makes closing `s` send a RST (SO_LINGER 0, which never blocks): an
/// aborted relay is passed on as an abort, not as an orderly end of stream.
pub(crate) fn reset_on_drop(s: &tokio::net::TcpStream) {
    socket2::SockRef::from(s).set_linger(Some(std::time::Duration::ZERO)).ok();
}

/// Relays between the near end's halves and the far end's halves until
/// both directions have ended, one end fails, or nothing has moved for
/// `idle` (then at once: the caller drops both connections).
pub(crate) async fn relay<NR, NW, FR, FW>(
    near: (&mut NR, &mut NW),
    far: (&mut FR, &mut FW),
    moved: &Moved,
    idle: Duration,
) -> Outcome
where
    NR: AsyncRead + Unpin + ?Sized,
    NW: AsyncWrite + Unpin + ?Sized,
    FR: AsyncRead + Unpin + ?Sized,
    FW: AsyncWrite + Unpin + ?Sized,
{
    let activity = Activity { start: Instant::now(), last_ms: AtomicU64::new(0) };
    let up = pump(near.0, far.1, &moved.up, End::Near, &activity);
    let down = pump(far.0, near.1, &moved.down, End::Far, &activity);
    tokio::select! {
        r = async { tokio::try_join!(up, down) } => match r {
            Ok(((), ())) => Outcome::Closed,
            Err((end, e)) => Outcome::Failed(end, e),
        },
        () = activity.idle_for(idle) => Outcome::Idle(idle),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(3600);

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
            relay((&mut ar, &mut aw), (&mut br, &mut bw), &m2, LONG).await
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
            relay((&mut ar, &mut aw), (&mut br, &mut bw), &m2, LONG).await
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
        let out = relay((&mut ar, &mut aw), (&mut br, &mut bw), &moved, LONG).await;
        assert!(matches!(out, Outcome::Failed(End::Far, _)), "{out:?}");
    }

    /// Nothing moving for the idle time ends the relay; a trickle, or a
    /// direction still draining into a slow reader, keeps it.
    #[tokio::test]
    async fn hostile_idle_relay_ends() {
        const IDLE: Duration = Duration::from_secs(1);
        let (mut app, a1) = tokio::io::duplex(1024);
        let (b0, mut far) = tokio::io::duplex(1024);
        let moved = std::sync::Arc::new(Moved::default());
        let m2 = moved.clone();
        let started = Instant::now();
        let task = tokio::spawn(async move {
            let (mut ar, mut aw) = tokio::io::split(a1);
            let (mut br, mut bw) = tokio::io::split(b0);
            relay((&mut ar, &mut aw), (&mut br, &mut bw), &m2, IDLE).await
        });
        // A byte every 0.4 s for 2 s: never 1 s without one.
        for _ in 0..5 {
            tokio::time::sleep(IDLE * 2 / 5).await;
            app.write_all(b"x").await.unwrap();
            let mut b = [0u8; 1];
            far.read_exact(&mut b).await.unwrap();
        }
        assert!(!task.is_finished(), "a trickle is not idle");
        let out = task.await.unwrap();
        assert!(matches!(out, Outcome::Idle(d) if d == IDLE), "{out:?}");
        let took = started.elapsed();
        assert!(took >= IDLE * 3 && took < IDLE * 10, "{took:?}");
        assert_eq!(moved.up.load(Ordering::Relaxed), 5);
    }

    /// The dial watch: a peer's close or reset is news, its early bytes are
    /// kept for the relay.
    #[tokio::test]
    async fn gone_sees_the_peer_leave_and_keeps_early_bytes() {
        let (mut peer, mut us) = tokio::io::duplex(64);
        let mut early = Vec::new();
        peer.write_all(b"GET /").await.unwrap();
        let waited = tokio::time::timeout(Duration::from_millis(100), gone(&mut us, &mut early)).await;
        assert!(waited.is_err() && early == b"GET /", "early data means the peer is there");
        let (peer, mut us) = tokio::io::duplex(64);
        drop(peer);
        let mut early = Vec::new();
        assert_eq!(gone(&mut us, &mut early).await, "it closed the connection");
    }
}
