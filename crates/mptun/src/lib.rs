//! tokio runtime over TUN (see issue).
