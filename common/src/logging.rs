//! Process logging shared by the fleet binaries: `tracing` to standard
//! error, colour only on a terminal, filter in `EnvFilter` syntax.

/// Installs the global subscriber with `filter` (default `info`; an invalid
/// filter falls back to `info`).
pub fn init(filter: Option<&str>) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter.unwrap_or("info"))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
