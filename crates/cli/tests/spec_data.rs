//! The spec's data is copied into the project byte for byte: the manifests' sha256 must equal
//! the digests pinned in the seed, and every fixture must equal the spec's copy.

use turnstile_admission::digest::sha256_digest;

fn digest_of(path: &str) -> String {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path);
    sha256_digest(&std::fs::read(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display())))
}

#[test]
fn manifests_match_the_digests_pinned_in_the_seed() {
    assert_eq!(
        digest_of("manifests/load-manifest.v1.json"),
        "sha256:9c6db981b0e1d124e317651ed15e8972fbf27b7a7596b15aa23ea3baac4bb03f"
    );
    assert_eq!(
        digest_of("manifests/load-manifest.v2.json"),
        "sha256:416a41466dc58063f45b5e5e9a7ad78b011cf6d3be50b081bab6e47c76a28a0c"
    );
}

#[test]
fn fixtures_are_byte_copies_of_the_spec() {
    let expected = [
        (
            "binding-fallback.json",
            "sha256:469c1f089f33c0d3002869926e9b91d145a8af731681337a0f3b08ad1318b97d",
        ),
        (
            "binding-jev.json",
            "sha256:00478f1cfeac89a25efd1256b3f8a671de824daa98827b538cff68ebea30ae1e",
        ),
        (
            "binding-llm-subagent.json",
            "sha256:1865524f5d3d909d2ce25e2c44db697fec3efdeaa38f4fd43f84007383585a06",
        ),
        (
            "decision-category.json",
            "sha256:b6aa1b1858690caad8d87c274e84cc9ac408d89ea0da5884b7299c470ff01007",
        ),
        (
            "decision-core_unavailable.json",
            "sha256:83073e03a1abeeb68369701dac5ad78ced8df66719a8a651a78527eb6f5471c7",
        ),
        (
            "decision-severity.json",
            "sha256:948d57330a8a731ccfd815971040324fa2a1c01a038df26f02f89e6cee3bef02",
        ),
        (
            "dispatcher-request-jev.json",
            "sha256:7f67dc8b49e9b6b1e741ad877ee0d16d3d9934cc479692a870e4ae44ed62de82",
        ),
        (
            "dispatcher-request-llm.json",
            "sha256:1c10f02db91c7a7ab891005b832a0f29130f022d139be24595277a4d4826e8be",
        ),
        (
            "input.json",
            "sha256:00d18c4c8039317986cced8df1de11b4565f008feefac2c828d811ddeb6b1d19",
        ),
        (
            "llm-ruleset-result.json",
            "sha256:81a674fbc32ae9df8b3e3bdf4cfd1dc478f8fa1e9eeb1a25eb906a606d767ba8",
        ),
        (
            "projection-policy-jev.json",
            "sha256:189f66607b86dbfe8e2451499c52602a1975ff0468c41e4339c5fbc858556a95",
        ),
        (
            "result-core_unavailable.json",
            "sha256:0ee61b3acb57b2bc903477fe5df08c9f8ac3034b9f810750b53ec88b11629497",
        ),
        (
            "ruleset-collect.json",
            "sha256:52c94f4873973c105e397f0ce7413ca0ef29da9b53f62d50d1103a4e48a0039d",
        ),
        (
            "ruleset-result.json",
            "sha256:7c3910d1ae4b17d6e3482673a11f79d928d9d81f8c0c1d13315dfbb77d04b64d",
        ),
        (
            "ruleset.json",
            "sha256:ae8200d42b107d0a9959795588d28e799c90f46e00c4f460658bd45e476e09c0",
        ),
        (
            "worker-fixture.json",
            "sha256:20d9f77343b130a42573ce3137ac1f3785413bc4b85adb0650554fc3964db4fa",
        ),
    ];
    for (name, digest) in expected {
        assert_eq!(
            digest_of(&format!("examples/fixtures/{name}")),
            digest,
            "{name}"
        );
    }
}
