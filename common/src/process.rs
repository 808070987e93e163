//! The shape every fleet binary's `main` shares: validate the configuration,
//! start a runtime, bind, run until a signal, and exit with a code that tells
//! a supervisor what happened: 2 for a usage or configuration error (fix the
//! flags), 1 for a failure while running (look at the logs).

use std::future::Future;
use std::net::SocketAddr;
use std::process::ExitCode;

/// A configuration a process cannot run with (flags, its `--config` file,
/// files they name): the message names the setting at fault and what it
/// accepts. The process exits with 2: fix the configuration, do not retry.
#[derive(Clone, Debug, Eq, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

impl ConfigError {
    /// A refusal of `setting` (a flag, as `--name`) for `problem`.
    pub fn setting(setting: &str, problem: impl std::fmt::Display) -> Self {
        Self(format!("{setting}: {problem}"))
    }
}

impl From<String> for ConfigError {
    fn from(message: String) -> Self {
        Self(message)
    }
}

impl From<&str> for ConfigError {
    fn from(message: &str) -> Self {
        Self(message.to_owned())
    }
}

/// Why a binary stopped.
#[derive(Debug)]
pub enum Failure {
    /// Bad flags, configuration or an address that cannot be bound.
    Usage(String),
    /// A failure while running.
    Runtime(String),
}

/// Binds `addr`, or says which address could not be bound.
///
/// # Errors
/// [`Failure::Usage`] naming the address.
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, Failure> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|error| Failure::Usage(format!("cannot listen on {addr}: {error}")))
}

/// A runtime of `threads` worker threads: 0 for one per CPU this process
/// may use (`std::thread::available_parallelism`, which honours the CPU
/// affinity and a cgroup quota); a single thread is a current-thread
/// runtime, whose tasks never hand off to another thread.
///
/// # Errors
/// The runtime cannot start.
pub fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let threads = if threads == 0 {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    } else {
        threads
    };
    if threads == 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    }
}

/// Runs `serve` with a validated `config` on a fresh multi-threaded runtime,
/// printing any failure as `NAME: message` and mapping it to an exit code.
pub fn main<C, E, Fut>(name: &str, config: Result<C, E>, serve: impl FnOnce(C) -> Fut) -> ExitCode
where
    ConfigError: From<E>,
    Fut: Future<Output = Result<(), Failure>>,
{
    run_on(name, config, |_| tokio::runtime::Runtime::new(), serve)
}

/// [`main`] on a [`runtime`] of as many threads as `threads` says for the
/// configuration.
pub fn main_with_threads<C, E, Fut>(
    name: &str,
    config: Result<C, E>,
    threads: impl FnOnce(&C) -> usize,
    serve: impl FnOnce(C) -> Fut,
) -> ExitCode
where
    ConfigError: From<E>,
    Fut: Future<Output = Result<(), Failure>>,
{
    run_on(name, config, |config| runtime(threads(config)), serve)
}

/// Runs `serve` on the runtime `start` builds for the configuration.
fn run_on<C, E, Fut>(
    name: &str,
    config: Result<C, E>,
    start: impl FnOnce(&C) -> std::io::Result<tokio::runtime::Runtime>,
    serve: impl FnOnce(C) -> Fut,
) -> ExitCode
where
    ConfigError: From<E>,
    Fut: Future<Output = Result<(), Failure>>,
{
    let result = config
        .map_err(|error| Failure::Usage(ConfigError::from(error).to_string()))
        .and_then(|config| {
            let runtime = start(&config)
                .map_err(|error| Failure::Runtime(format!("cannot start the runtime: {error}")))?;
            runtime.block_on(serve(config))
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            eprintln!("{name}: {message}");
            ExitCode::from(2)
        }
        Err(Failure::Runtime(message)) => {
            eprintln!("{name}: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::runtime::RuntimeFlavor;

    #[test]
    fn one_thread_is_a_current_thread_runtime_more_are_multi_threaded() {
        assert_eq!(
            super::runtime(1).unwrap().handle().runtime_flavor(),
            RuntimeFlavor::CurrentThread
        );
        let two = super::runtime(2).unwrap();
        assert_eq!(two.handle().runtime_flavor(), RuntimeFlavor::MultiThread);
        assert_eq!(two.metrics().num_workers(), 2);
        // 0: one per CPU this process may use.
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        let auto = super::runtime(0).unwrap();
        assert_eq!(auto.metrics().num_workers(), cpus);
    }
}
