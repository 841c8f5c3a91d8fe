//! `turnstile profile …`: admission profiles from the command line.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use turnstile_admission::Profile;

#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// Print the canonical profile digest ("sha256:…") of a profile or load-manifest file:
    /// the sha256 of the canonical JSON of its `{providers, workspace}` limits.
    Digest {
        /// A JSON file with `workspace` and `providers` (a profile or a v2 load manifest).
        /// Without one, the embedded v2 load manifest is digested.
        file: Option<PathBuf>,
    },
}

pub fn run(command: ProfileCommand) -> anyhow::Result<()> {
    match command {
        ProfileCommand::Digest { file: Some(file) } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            println!("{}", profile_digest(&text, &file.display().to_string())?);
            Ok(())
        }
        ProfileCommand::Digest { file: None } => {
            let digest = profile_digest(EMBEDDED_MANIFEST_V2, "embedded load-manifest.v2.json")?;
            println!("{digest}");
            eprintln!("(profile digest of the embedded load-manifest.v2.json)");
            Ok(())
        }
    }
}

/// The pinned v2 load manifest, byte for byte.
const EMBEDDED_MANIFEST_V2: &str = include_str!("../../../../manifests/load-manifest.v2.json");

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
    .with_context(|| format!("{source} has invalid limits"))?;
    profile
        .validate()
        .with_context(|| format!("{source} has invalid limits"))?;
    Ok(profile.digest()?)
}
