//! What the echo examples share: their paths, given as `mptun send --path`
//! and `mptun serve --path` give them, and the stack over them.

use clap::Args;
use mptun::pathspec::PathSpec;
use mptun::StackBuilder;

/// `--netns` and the repeatable `--path`.
#[derive(Args)]
pub struct Paths {
    /// Create the TUN devices in this network namespace (default: this one).
    #[arg(long)]
    pub netns: Option<String>,
    /// A path, as `mptun send --path` (repeat for several).
    #[arg(long = "path", value_name = "SPEC", required = true)]
    pub paths: Vec<PathSpec>,
}

impl Paths {
    /// A stack builder over freshly created TUNs, with the paths' flags.
    pub fn stack(&self) -> std::io::Result<StackBuilder> {
        PathSpec::stack_builder(&self.paths, self.netns.as_deref())
    }
}
