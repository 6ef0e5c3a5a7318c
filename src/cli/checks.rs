//! `bundlescope checks`: every check id and its rule.

use anyhow::Result;
use bundlescope::finding::checks::ALL;

/// Arguments of `checks`.
#[derive(clap::Args)]
pub struct Args {
    /// Print a Markdown table (as in the README).
    #[arg(long)]
    pub markdown: bool,
}

pub fn run(a: Args) -> Result<i32> {
    let width = ALL.iter().map(|c| c.id.as_str().len()).max().unwrap_or(0);
    for c in ALL {
        if a.markdown {
            println!("| `{}` | {} |", c.id, c.rule);
        } else {
            println!("{:<width$}  {}", c.id, c.rule);
        }
    }
    Ok(super::EXIT_OK)
}
