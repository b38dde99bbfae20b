//! Packet I/O (TUN, netns, pcap).
