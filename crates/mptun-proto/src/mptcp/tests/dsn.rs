//! Data sequence numbers carried in 32 bits, expanded to the 64-bit space.

use super::*;
use crate::mptcp::data_rx::expand32;

#[test]
fn thirty_two_bit_data_acks_are_expanded() {
    assert_eq!(expand32(0x0000_0010, 0x1_ffff_fff0), 0x2_0000_0010);
    assert_eq!(expand32(0xffff_fff0, 0x2_0000_0010), 0x1_ffff_fff0);
    assert_eq!(expand32(0x1234, 0x5_0000_1000), 0x5_0000_1234);
    let mut n = net(EndpointConfig::default(), {
        let mut s = EndpointConfig::default();
        s.mptcp.enabled = true;
        s
    });
    let h = n.connect();
    n.run(Duration::from_millis(50), &mut pass());
    n.a.send(h, &[7u8; 3000]).unwrap_or(0);
    // Rewrite the server's DATA_ACKs to their 32-bit form.
    n.run(Duration::from_millis(200), &mut |from_a, p| {
        if from_a {
            return Some(p);
        }
        Some(rewrite(&p, &mut |m| {
            if let MptcpOption::Dss { data_ack: Some(a), .. } = m {
                a.ack &= 0xffff_ffff;
                a.ack64 = false;
            }
        }))
    });
    let c = n.a.conn(h).unwrap();
    assert_eq!(c.info().bytes_acked, 3000);
}

#[test]
fn expand32_picks_the_closest_value_modulo_2_64() {
    use super::data_rx::expand32;
    // Ordinary: the same 2^32 block, the next, the previous.
    assert_eq!(expand32(5, 0x1_0000_0003), 0x1_0000_0005);
    assert_eq!(expand32(2, 0x1_ffff_fff0), 0x2_0000_0002);
    assert_eq!(expand32(0xffff_fff0, 0x2_0000_0002), 0x1_ffff_fff0);
    // Across the 2^64 wrap: 5 is 15 ahead of 2^64 - 10, not 2^32 behind it.
    assert_eq!(expand32(5, u64::MAX - 9), 5);
    assert_eq!(expand32(0xffff_fff0, 3), u64::MAX - 15);
}
