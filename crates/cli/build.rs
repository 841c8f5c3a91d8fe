//! Release builds of the `turnstile` binary on Linux compress their debug sections at link
//! time (`--compress-debug-sections=zlib`, GNU ld and lld): the line tables stay in the binary,
//! so backtraces keep file:line and profilers resolve lines (both read zlib-compressed DWARF),
//! at about a third of the size. Debug builds are left alone (faster links).
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let release = std::env::var("PROFILE").is_ok_and(|profile| profile == "release");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    if release && linux {
        println!("cargo:rustc-link-arg-bins=-Wl,--compress-debug-sections=zlib");
    }
}
