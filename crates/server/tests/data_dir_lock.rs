//! One process per data directory: a second service on a held directory is refused with the
//! holder's PID, and the directory is free again once the first one stops.

use turnstile_server::DataLockError;
use turnstile_server::{Config, ServerError};
use turnstile_testkit::TestServer;

fn start_second(dir: &std::path::Path) -> Result<(), ServerError> {
    let config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        ..Config::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let server = turnstile_server::start(config).await?;
        server.shutdown().await.map(drop)
    })
}

#[test]
fn a_second_service_on_a_held_data_directory_is_refused_naming_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let first = TestServer::start(dir.path(), |_| {});
    match start_second(dir.path()) {
        Err(ServerError::DataLock(DataLockError::Held { pid, .. })) => {
            assert_eq!(pid, Some(std::process::id()));
        }
        other => panic!("the second start must be refused, got {other:?}"),
    }
    let message = start_second(dir.path()).unwrap_err().to_string();
    assert!(
        message.contains("in use by another turnstile process"),
        "{message}"
    );
    drop(first);
    start_second(dir.path()).expect("the directory is free once the first service stopped");
}
