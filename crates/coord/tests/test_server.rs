//! Which server the Redis-backed tests run against: `redis-server` by default, the binary
//! `TURNSTILE_TEST_REDIS_SERVER` names otherwise (`.ci/run` runs this crate's tests and the
//! CLI's replica tests again with `valkey-server`). A misconfigured run must not test the same
//! server twice: the server that answers is checked by `INFO server`.

use turnstile_testkit::{server_binary, RedisServer, ServerKind, SERVER_ENV};

#[test]
fn the_server_that_answers_is_the_one_the_environment_asks_for() {
    let binary = server_binary();
    let server = RedisServer::start().unwrap_or_else(|error| panic!("{error}"));
    let answered = server
        .query_info()
        .unwrap_or_else(|error| panic!("{error}"));
    eprintln!(
        "Redis-backed tests run against {answered} ({binary}, {SERVER_ENV}={:?})",
        std::env::var(SERVER_ENV).ok()
    );
    assert_eq!(&answered, server.info());
    assert_eq!(answered.kind, ServerKind::expected_for(&binary));
    match std::env::var(SERVER_ENV).ok().as_deref() {
        Some(asked) if asked.contains("valkey") => {
            assert_eq!(answered.kind, ServerKind::Valkey, "asked for {asked}");
            assert!(
                !answered.version.is_empty() && answered.version != answered.redis_version,
                "Valkey reports its own version (valkey_version), not only redis_version: {answered:?}"
            );
        }
        None | Some("") => assert_eq!(
            answered.kind,
            ServerKind::Redis,
            "the default is redis-server"
        ),
        Some(_) => {}
    }
}

#[test]
fn a_server_binary_that_runs_the_other_implementation_is_refused() {
    // A `valkey-server` that is really Redis (or the other way round) would test one server
    // twice: starting it is an error naming the binary.
    let dir = std::env::temp_dir().join(format!("turnstile-test-server-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The binary under test, behind a link named as the other implementation's.
    let binary = server_binary();
    let fake_name = match ServerKind::expected_for(&binary) {
        ServerKind::Redis => "valkey-server",
        ServerKind::Valkey => "redis-server",
    };
    let real = if binary.contains('/') {
        std::path::PathBuf::from(&binary)
    } else {
        which(&binary).unwrap_or_else(|| panic!("{binary} is not on PATH"))
    };
    let fake = dir.join(fake_name);
    let _ = std::fs::remove_file(&fake);
    std::os::unix::fs::symlink(&real, &fake).unwrap();
    let started = RedisServer::start_binary(fake.to_str().unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    let error = match started {
        Err(error) => error,
        Ok(server) => panic!("{} started as {}", fake.display(), server.info()),
    };
    assert!(
        matches!(
            error,
            turnstile_testkit::RedisServerError::WrongServer { .. }
        ),
        "{error}"
    );
    assert!(error.to_string().contains(fake_name), "{error}");
}

fn which(binary: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| std::path::Path::new(dir).join(binary))
        .find(|path| path.is_file())
}
