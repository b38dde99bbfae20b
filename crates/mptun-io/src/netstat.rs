//! The kernel's own TCP and MPTCP counters, by the names `nstat` prints
//! (`TcpExtTCPTimeouts`, `MPTcpExtMPJoinAckRx`, `TcpRetransSegs`): what the
//! CLI's `--kernel` runs and the interop tests compare mptun's counters with.
//!
//! `/proc/net/netstat` and `/proc/net/snmp` hold pairs of lines, a header
//! (`TcpExt: SyncookiesSent ...`) and its values (`TcpExt: 0 ...`); a counter's
//! name is the prefix joined to its column's name.

use std::collections::BTreeMap;
use std::io;

/// The counters in the text of `/proc/net/netstat` or `/proc/net/snmp`
/// (or both, concatenated); a value that is not a number (none should be)
/// is skipped rather than failing the whole read.
pub fn parse(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.chunks(2) {
        let [names, values] = pair else { continue };
        let mut n = names.split_whitespace();
        let mut v = values.split_whitespace();
        let (Some(prefix), Some(_)) = (n.next(), v.next()) else { continue };
        let prefix = prefix.trim_end_matches(':');
        for (name, value) in n.zip(v) {
            if let Ok(x) = value.parse::<u64>() {
                out.insert(format!("{prefix}{name}"), x);
            }
        }
    }
    out
}

/// The counters of the calling thread's network namespace:
/// `/proc/thread-self` follows the thread (so this works inside
/// [`crate::run_in_netns`]), where `/proc/self/net` would be the process
/// leader's namespace.
pub fn read() -> io::Result<BTreeMap<String, u64>> {
    let mut text = std::fs::read_to_string("/proc/thread-self/net/netstat")?;
    text.push_str(&std::fs::read_to_string("/proc/thread-self/net/snmp")?);
    Ok(parse(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_value_lines_pair_up() {
        let text = "TcpExt: SyncookiesSent TCPTimeouts\nTcpExt: 0 7\nMPTcpExt: MPCapableSYNRX\nMPTcpExt: 3\n\
                    Tcp: RtoAlgorithm MaxConn\nTcp: 1 -1\n";
        let m = parse(text);
        assert_eq!(m.get("TcpExtTCPTimeouts"), Some(&7));
        assert_eq!(m.get("MPTcpExtMPCapableSYNRX"), Some(&3));
        assert_eq!(m.get("TcpRtoAlgorithm"), Some(&1));
        assert_eq!(m.get("TcpMaxConn"), None, "-1 is no counter");
    }

    #[test]
    fn reads_this_namespace() {
        let m = read().unwrap();
        assert!(m.keys().any(|k| k.starts_with("Tcp")), "{m:?}");
    }
}
