//! `turnstile profile …`

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// Print the canonical profile digest of a profile or manifest file.
    Digest { file: std::path::PathBuf },
}

pub fn run(command: ProfileCommand) -> anyhow::Result<()> {
    match command {
        ProfileCommand::Digest { file } => {
            let _ = file;
            Ok(())
        }
    }
}
