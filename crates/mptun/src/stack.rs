//! The stack: one sans-IO endpoint, its devices and paths, and the driver task.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use mptun_io::paths::DeviceId;
use mptun_io::{IoStats, PacketIo, PcapTap, PcapWriter, SharedPcap, WriterThread};
use mptun_proto::endpoint::Limits;
use mptun_proto::pm::{EndpointFlags, PmEndpoint};
use mptun_proto::tcp::TcpConfig;
use mptun_proto::{ConnConfig, Counters, Endpoint, EndpointConfig, MptcpConfig};

use crate::clock::Clock;
use crate::driver::Driver;
use crate::state::{Shared, State};
use crate::stats::RuntimeStats;
use crate::{StreamInfo, StreamOptions};

/// A user-space MPTCP/TCP host: every [`crate::MptcpStream`] and
/// [`crate::MptcpListener`] lives on one.
///
/// Cheap to clone. The driver task runs for as long as any clone (streams
/// and listeners hold one) exists; when the last goes, connections still
/// open are reset, as when a process exits, and those the application
/// closed and let go, all their data acknowledged, first get a moment to
/// finish their close.
#[derive(Clone)]
pub struct Stack {
    pub(crate) inner: Arc<StackInner>,
}

pub(crate) struct StackInner {
    pub(crate) shared: Arc<Shared>,
    devices: Vec<Arc<dyn PacketIo>>,
    paths: Vec<Path>,
    default_cfg: ConnConfig,
    /// Every device cuts TSO super-segments itself ([`mptun_io::DeviceCaps::tso`]).
    devices_tso: bool,
    high_res_timer: bool,
}

impl Drop for StackInner {
    fn drop(&mut self) {
        // The device handles before the flag: the driver keeps its own until
        // it ends, so it, not the thread dropping the stack, drops the last
        // of them (a writer thread's join, a capture's flush, a user
        // device's own drop, which may panic).
        drop(std::mem::take(&mut self.devices));
        self.shared.update(|st| st.shutdown = true);
    }
}

/// A path of the stack: a local address and the device that carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Path {
    /// The address the stack owns on this path: subflows are bound to it.
    pub local: IpAddr,
    /// The device's name as the OS shows it (`ip link`), for reports and
    /// for telling paths apart when several share one device.
    pub device: String,
}

/// Builds a [`Stack`].
pub struct StackBuilder {
    paths: Vec<(IpAddr, Arc<dyn PacketIo>)>,
    tcp: TcpConfig,
    mptcp: MptcpConfig,
    pm_from_paths: bool,
    seed: Option<[u8; 32]>,
    pcap: Option<PathBuf>,
    pcap_dir: Option<PathBuf>,
    limits: Limits,
    gro: bool,
    writer_threads: bool,
    gather: bool,
}

impl StackBuilder {
    /// The endpoint's limits (ports, half-open and connection counts, join
    /// rates): Linux's defaults unless set.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Adds a path: `local` is this stack's address on it (the source of
    /// its subflows), `device` the packet device it lives on. Give the same
    /// `Arc` for several addresses to carry several paths on one device
    /// (one TUN with several addresses), different ones for a device per path.
    pub fn path(mut self, local: IpAddr, device: Arc<dyn PacketIo>) -> Self {
        self.paths.push((local, device));
        self
    }

    /// Default configuration of every connection (listeners use it; per
    /// stream, [`StreamOptions`] override it).
    pub fn tcp_config(mut self, tcp: TcpConfig) -> Self {
        self.tcp = tcp;
        self
    }

    /// Default MPTCP settings (offer MPTCP, buffers, path manager). Unless
    /// its path manager lists endpoints, every path address becomes a
    /// `subflow` endpoint, as `ip mptcp endpoint add ADDR subflow` would make
    /// it: a client then opens one subflow per path.
    pub fn mptcp_config(mut self, mptcp: MptcpConfig) -> Self {
        self.pm_from_paths = mptcp.pm.endpoints.is_empty();
        self.mptcp = mptcp;
        self
    }

    /// Seed for the endpoint's CSPRNG (ISNs, ports, MPTCP keys). Default: OS
    /// entropy. Fix it only to reproduce a run: predictable ISNs and keys
    /// make connections spoofable.
    pub fn seed(mut self, seed: [u8; 32]) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Records every device's traffic, both directions, into one pcap file
    /// (raw IP; Wireshark dissects MPTCP in it).
    pub fn pcap(mut self, file: impl Into<PathBuf>) -> Self {
        self.pcap = Some(file.into());
        self
    }

    /// Records each device into its own `DIR/<device name>.pcap`.
    pub fn pcap_per_device(mut self, dir: impl Into<PathBuf>) -> Self {
        self.pcap_dir = Some(dir.into());
        self
    }

    /// Whether received TCP super-packets (a TUN's GRO/TSO reads) reach the
    /// protocol core whole, one segment and one acknowledgement per up to
    /// 64 KiB (on by default: it is what makes a fast receiver, as Linux's
    /// GRO). Off, they are cut into wire segments first and acknowledged as
    /// they would be one by one, as the simulator's receiver does: the lab
    /// turns it off to reproduce the simulator's scenarios, whose outcome
    /// (HyStart's exit on the delay of each acknowledgement, for one)
    /// depends on the acknowledgement pattern.
    pub fn gro(mut self, on: bool) -> Self {
        self.gro = on;
        self
    }

    /// Whether each device's writes run on a thread of their own
    /// ([`WriterThread`]) rather than in the driver task (on by default).
    /// A write into a TUN carries the receiving kernel's work for the
    /// packet on the writer's CPU; on its own thread that work overlaps
    /// with the driver building the next batch instead of delaying it.
    /// Off, one thread does everything: for a single-core machine, or to
    /// measure what the thread buys.
    pub fn writer_threads(mut self, on: bool) -> Self {
        self.writer_threads = on;
        self
    }

    /// Whether data segments reach devices that can take them
    /// ([`mptun_io::DeviceCaps::gather`], a TUN with offload) with their payload still
    /// in the send buffer, written behind the headers by the device's
    /// `writev` (on by default): the payload is then copied once on its
    /// way out, by the kernel, as a kernel socket's is, instead of first
    /// into the packet here. Off: for measuring what it buys.
    pub fn zero_copy_send(mut self, on: bool) -> Self {
        self.gather = on;
        self
    }

    /// Starts the driver task on the current tokio runtime.
    pub fn build(self) -> io::Result<Stack> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(io::Error::other("Stack::build must be called inside a tokio runtime"));
        }
        if self.paths.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "a stack needs at least one path"));
        }
        let mut devices: Vec<Arc<dyn PacketIo>> = Vec::new();
        let mut routes: Vec<(IpAddr, DeviceId)> = Vec::new();
        let mut paths = Vec::new();
        for (local, dev) in &self.paths {
            if local.is_unspecified() || local.is_multicast() {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{local} cannot be a path address")));
            }
            if routes.iter().any(|(ip, _)| ip == local) {
                return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{local} given for two paths")));
            }
            let id = match devices.iter().position(|d| std::ptr::addr_eq(Arc::as_ptr(d), Arc::as_ptr(dev))) {
                Some(id) => id,
                None => {
                    devices.push(dev.clone());
                    devices.len() - 1
                }
            };
            routes.push((*local, id));
            paths.push(Path { local: *local, device: dev.name().to_owned() });
        }
        let (mut devices, pcaps) = self.wrap_pcap(devices)?;
        if self.writer_threads {
            devices = devices
                .into_iter()
                .map(|d| WriterThread::new(d).map(|w| Arc::new(w) as Arc<dyn PacketIo>))
                .collect::<io::Result<_>>()?;
        }
        let seed = match self.seed {
            Some(s) => s,
            None => {
                let mut s = [0u8; 32];
                getrandom::fill(&mut s).map_err(|e| io::Error::other(format!("no OS entropy: {e}")))?;
                s
            }
        };
        let mut mptcp = self.mptcp.clone();
        if self.pm_from_paths {
            mptcp.pm.endpoints = routes
                .iter()
                .zip(1u8..=255)
                .map(|(&(addr, _), id)| PmEndpoint {
                    id,
                    addr,
                    flags: EndpointFlags {
                        signal: false,
                        subflow: true,
                        backup: false,
                        fullmesh: false,
                        laminar: false,
                    },
                    port: None,
                })
                .collect();
        }
        // Checksums are left to the devices when every one completes them
        // (a TUN with offload): the send path then never sums a payload.
        let mut tcp = self.tcp.clone();
        tcp.checksum_offload = devices.iter().all(|d| d.caps().checksum_offload);
        tcp.gather_payload = self.gather && tcp.checksum_offload && devices.iter().all(|d| d.caps().gather);
        // Super-segments only for devices that cut them: one for another is
        // cut on its way into the device's batch, a slot per wire segment,
        // and a peer announcing a tiny MSS with a large window makes one of
        // more wire segments than a batch has slots.
        let devices_tso = devices.iter().all(|d| d.caps().tso);
        tcp.tso &= devices_tso;
        let default_cfg = ConnConfig { tcp: tcp.clone(), mptcp: mptcp.clone() };
        let mut ep = Endpoint::new(EndpointConfig { tcp, mptcp, limits: self.limits.clone() }, seed);
        // Each subflow's MSS from the MTU of the device its address lives on.
        for (local, dev) in &self.paths {
            ep.set_device_mtu(*local, u32::try_from(dev.mtu()).unwrap_or(u32::MAX));
        }
        let local_ips = routes.iter().map(|(ip, _)| *ip).collect();
        let shared = Arc::new(Shared::new(State::new(ep, local_ips), Clock::new()));
        let driver = Driver::new(shared.clone(), devices.clone(), routes, pcaps, self.gro);
        let high_res_timer = driver.high_resolution_timer();
        let span = tracing::info_span!("mptun", paths = ?paths.iter().map(|p| p.local).collect::<Vec<_>>());
        tokio::spawn(tracing::Instrument::instrument(driver, span));
        Ok(Stack { inner: Arc::new(StackInner { shared, devices, paths, default_cfg, devices_tso, high_res_timer }) })
    }

    /// Wraps the devices in pcap taps if asked; returns them and the writers
    /// (the driver flushes those every second, so a capture of a process
    /// that is killed is still readable up to the last second).
    #[allow(clippy::type_complexity)]
    fn wrap_pcap(&self, devices: Vec<Arc<dyn PacketIo>>) -> io::Result<(Vec<Arc<dyn PacketIo>>, Vec<SharedPcap>)> {
        if let Some(file) = &self.pcap {
            let w: SharedPcap = Arc::new(Mutex::new(PcapWriter::create(file)?));
            let devs = devices
                .into_iter()
                .map(|d| Arc::new(PcapTap::with_writer(d, w.clone())) as Arc<dyn PacketIo>)
                .collect();
            return Ok((devs, vec![w]));
        }
        if let Some(dir) = &self.pcap_dir {
            std::fs::create_dir_all(dir)?;
            let mut writers = Vec::new();
            let mut devs = Vec::new();
            for d in devices {
                let w: SharedPcap = Arc::new(Mutex::new(PcapWriter::create(dir.join(format!("{}.pcap", d.name())))?));
                writers.push(w.clone());
                devs.push(Arc::new(PcapTap::with_writer(d, w)) as Arc<dyn PacketIo>);
            }
            return Ok((devs, writers));
        }
        Ok((devices, Vec::new()))
    }
}

impl Stack {
    /// A builder with Linux-like defaults and no paths yet.
    pub fn builder() -> StackBuilder {
        StackBuilder {
            paths: Vec::new(),
            tcp: crate::options::runtime_tcp_config(),
            mptcp: MptcpConfig::default(),
            pm_from_paths: true,
            seed: None,
            pcap: None,
            pcap_dir: None,
            limits: Limits::default(),
            gro: true,
            writer_threads: true,
            gather: true,
        }
    }

    /// Ends the stack now, for every handle, and returns once its driver
    /// has stopped: as when the last handle is dropped, every connection
    /// still open (or closed with data still unacknowledged) reset and
    /// every listener closed at once; those the application closed and
    /// let go, all their data acknowledged, given a moment (at most
    /// [`mptun_io::DRAIN_ON_DROP`]) to finish their close, and reset if
    /// they have not, so that a connection both ends closed in order ends
    /// without a reset; what the devices still held written or dropped
    /// (within as short a drain); and, where this was the last handle, the
    /// devices released, so a writer thread has finished and a capture is
    /// complete on disk. Dropping the stack does the same without the
    /// wait, for a program that must not block on it; a test or a tool
    /// that reads its capture next needs the wait. Streams and listeners
    /// still held see the stack gone.
    pub async fn shutdown(self) {
        let shared = self.inner.shared.clone();
        let mut done = std::pin::pin!(shared.driver_done.notified());
        // Registered before the check: a driver ending in between still
        // wakes this waiter.
        done.as_mut().enable();
        // This handle first, the flag after: the driver then drops the last
        // device handles (see `StackInner`'s drop), not this task.
        drop(self);
        shared.update(|st| st.shutdown = true);
        if !shared.lock().driver_gone {
            done.await;
        }
    }

    /// Protocol counters of every connection, past and present, with the
    /// kernel's `nstat` names ([`Counters::to_nstat`] prints them like nstat).
    pub fn counters(&self) -> Counters {
        self.inner.shared.lock().ep.counters()
    }

    /// The driver's own counters.
    pub fn runtime_stats(&self) -> RuntimeStats {
        self.inner.shared.lock().stats
    }

    /// Each device's name and counters.
    pub fn device_stats(&self) -> Vec<(String, IoStats)> {
        self.inner.devices.iter().map(|d| (d.name().to_owned(), d.stats())).collect()
    }

    /// The paths, in the order given to the builder.
    pub fn paths(&self) -> &[Path] {
        &self.inner.paths
    }

    /// Options preset with the stack's defaults, to adjust for one stream.
    pub fn stream_options(&self) -> StreamOptions {
        StreamOptions::from_config(self.inner.default_cfg.clone())
    }

    /// The path manager the stack was built with: options that still
    /// carry it follow the stack's path manager as it is changed at run
    /// time ([`crate::PathManager`]).
    pub(crate) fn built_pm(&self) -> &mptun_proto::pm::PmConfig {
        &self.inner.default_cfg.mptcp.pm
    }

    /// Whether the stack's devices complete TCP checksums (every one of
    /// them): its connections then leave the checksum to them, whatever
    /// options they were opened with.
    pub fn checksum_offload(&self) -> bool {
        self.inner.default_cfg.tcp.checksum_offload
    }

    /// Whether every device of the stack cuts TSO super-segments itself: a
    /// connection builds super-segments only then, whatever options it was
    /// opened with.
    pub(crate) fn devices_tso(&self) -> bool {
        self.inner.devices_tso
    }

    /// Whether the stack's connections leave payloads in their send
    /// buffers for the devices to gather ([`StackBuilder::zero_copy_send`]).
    pub fn zero_copy_send(&self) -> bool {
        self.inner.default_cfg.tcp.gather_payload
    }

    /// Whether the driver sleeps on a microsecond timer (timerfd) rather
    /// than tokio's millisecond wheel; see the `timer` module.
    pub fn has_high_resolution_timer(&self) -> bool {
        self.inner.high_res_timer
    }

    /// A snapshot of every live connection, like `ss -tiM`: for monitoring
    /// without owning the streams.
    pub fn connections(&self) -> Vec<StreamInfo> {
        let st = self.inner.shared.lock();
        st.ep
            .handles()
            .filter_map(|h| {
                let c = st.ep.conn(h)?;
                let (local, remote) = st.ep.addresses(h)?;
                Some(StreamInfo {
                    local,
                    remote,
                    established: st.ep.is_established(h),
                    conn: c.info(),
                    counters: c.counters(),
                })
            })
            .collect()
    }

    /// The core's internal state of every connection, one line each, with
    /// its poll timeout: what a test prints when a transfer stalls, so the
    /// failure can be diagnosed from the log alone.
    pub fn debug_state(&self) -> Vec<String> {
        let st = self.inner.shared.lock();
        st.ep
            .handles()
            .filter_map(|h| {
                let c = st.ep.conn(h)?;
                Some(format!("{:?} {:?} {}", st.ep.addresses(h), c.poll_timeout(), c.debug_state()))
            })
            .collect()
    }

    /// Live connections (including those closing or in TIME_WAIT).
    pub fn connection_count(&self) -> usize {
        self.inner.shared.lock().ep.handles().count()
    }

    /// The local address a connection to `remote` starts from: the first
    /// path of the same address family.
    pub(crate) fn pick_local(&self, remote: SocketAddr) -> Option<IpAddr> {
        self.inner.paths.iter().map(|p| p.local).find(|ip| ip.is_ipv4() == remote.is_ipv4())
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }
}

/// A handle to a [`Stack`] that does not keep it alive ([`Stack::downgrade`]):
/// for a monitor or a control socket, which must not hold a stack whose
/// program let it go (its connections would not be reset, its devices not
/// released).
#[derive(Clone, Debug)]
pub struct WeakStack(std::sync::Weak<StackInner>);

impl WeakStack {
    /// The stack, while some [`Stack`] handle still holds it.
    pub fn upgrade(&self) -> Option<Stack> {
        self.0.upgrade().map(|inner| Stack { inner })
    }
}

impl Stack {
    /// A handle that does not keep the stack alive.
    pub fn downgrade(&self) -> WeakStack {
        WeakStack(Arc::downgrade(&self.inner))
    }
}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stack").field("paths", &self.inner.paths).finish()
    }
}
