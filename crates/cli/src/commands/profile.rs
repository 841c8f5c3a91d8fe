//! `turnstile profile …`: admission profiles from the command line.
//!
//! `check FILE` validates a profile document exactly as `PUT /v1/workspaces/{w}/profiles/{v}`
//! would and reports every problem at once, each named by its field's path
//! (`providers.jev.tokensBurst`), a misspelt field with what it likely meant
//! (`profile_check.rs`). `digest FILE` prints the
//! profile digest of a profile or load-manifest file. Neither writes anything.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Subcommand;
use turnstile_admission::Profile;

use turnstile_cli::HintExt;

use super::profile_check::check_profile;

const PROFILE_HINT: &str = "every field is described in docs/profiles.md";

#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// Validate a profile file as the service would, naming the field and the problem.
    Check {
        /// The profile: `{"workspace": {...}, "providers": {...}, "principals": {...}}`.
        file: PathBuf,
    },
    /// Print the canonical profile digest ("sha256:…") of a profile or load-manifest file:
    /// the sha256 of the canonical JSON of its `{providers, workspace}` limits.
    Digest {
        /// A JSON file with `workspace` and `providers` (a profile or a v2 load manifest).
        file: PathBuf,
    },
}

pub fn run(command: ProfileCommand) -> anyhow::Result<()> {
    match command {
        ProfileCommand::Check { file } => {
            let text = read(&file)?;
            let profile = check_profile(&text)
                .with_context(|| format!("{} is not a valid profile", file.display()))
                .hint(PROFILE_HINT)?;
            let digest = profile.digest()?;
            println!(
                "ok: {} is a valid profile ({} provider{}, {} principal{}); digest {digest}",
                file.display(),
                profile.providers.len(),
                plural(profile.providers.len()),
                profile.principals.len(),
                plural(profile.principals.len()),
            );
            Ok(())
        }
        ProfileCommand::Digest { file } => {
            let text = read(&file)?;
            println!("{}", profile_digest(&text, &file.display().to_string())?);
            Ok(())
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn read(file: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(file)
        .with_context(|| format!("cannot read {}", file.display()))
        .hint("give the path of a JSON profile file, e.g. examples/profile.json")
}

/// Validates the limits of a profile or manifest document and returns its profile digest.
/// `source` names the document in error messages.
pub fn profile_digest(text: &str, source: &str) -> anyhow::Result<String> {
    let document: serde_json::Value =
        serde_json::from_str(text).with_context(|| format!("{source} is not JSON"))?;
    let part = |key: &str| {
        document
            .get(key)
            .cloned()
            .with_context(|| format!("{source} has no `{key}` object"))
    };
    let profile: Profile = serde_json::from_value(serde_json::json!({
        "workspace": part("workspace")?,
        "providers": part("providers")?,
    }))
    .with_context(|| format!("{source} has invalid limits"))
    .hint(format!(
        "`turnstile profile check {source}` names the field"
    ))?;
    profile
        .validate()
        .with_context(|| format!("{source} has invalid limits"))
        .hint(PROFILE_HINT)?;
    Ok(profile.digest()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_profile_is_valid() {
        let text = include_str!("../../../../examples/profile.json");
        check_profile(text).unwrap();
    }
}
