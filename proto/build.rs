//! Compiles the fleet's `.proto` files with `protox` (pure Rust, no `protoc`),
//! exactly as `corium-protocol` does, and writes the table of every method
//! either tier serves for `methods.rs` (`method_table.rs`: each path and
//! whether it streams), read from the fleet's descriptors and Corium's own
//! (`corium.v1`, compiled from the `corium.proto` inside the
//! `corium-protocol` package this build uses, where cargo unpacked it).

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/corium/fleet/v1/fleet.proto",
        "proto/google/rpc/status.proto",
        "proto/google/rpc/error_details.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptors = protox::compile(files, ["proto"])?;
    let mut table = String::new();
    let corium = corium_protocol_dir()?;
    let corium_proto = corium.join("proto/corium.proto");
    println!("cargo:rerun-if-changed={}", corium_proto.display());
    let corium_descriptors = protox::compile([corium_proto.as_path()], [corium.join("proto")])?;
    for set in [&corium_descriptors, &descriptors] {
        for file in &set.file {
            for service in &file.service {
                for method in &service.method {
                    let kind = match (method.client_streaming(), method.server_streaming()) {
                        (false, false) => "Unary",
                        (true, false) => "ClientStreaming",
                        (false, true) => "ServerStreaming",
                        (true, true) => "BidiStreaming",
                    };
                    let service = match file.package() {
                        "" => service.name().to_owned(),
                        package => format!("{package}.{}", service.name()),
                    };
                    writeln!(
                        table,
                        "    Method {{ path: \"/{service}/{}\", kind: RpcKind::{kind} }},",
                        method.name()
                    )?;
                }
            }
        }
    }
    std::fs::write(
        out.join("method_table.rs"),
        format!(
            "/// Every method, in the order the files declare them.\nconst METHODS: &[Method] = &[\n{table}];\n"
        ),
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}

/// The directory of the `corium-protocol` package this build uses: its
/// version from the workspace's `Cargo.lock`, its sources where cargo
/// unpacked them (`$CARGO_HOME/registry/src/<registry>/corium-protocol-<version>`;
/// cargo has downloaded it before any build script runs, as this crate
/// depends on it).
fn corium_protocol_dir() -> Result<PathBuf, Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let lock = manifest_dir
        .ancestors()
        .map(|dir| dir.join("Cargo.lock"))
        .find(|lock| lock.exists())
        .ok_or("no Cargo.lock above the proto crate")?;
    println!("cargo:rerun-if-changed={}", lock.display());
    let version = locked_version(&std::fs::read_to_string(&lock)?, "corium-protocol")
        .ok_or("Cargo.lock names no corium-protocol package")?;
    let cargo_home = std::env::var_os("CARGO_HOME").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo"),
        PathBuf::from,
    );
    let package = format!("corium-protocol-{version}");
    let registries = cargo_home.join("registry/src");
    std::fs::read_dir(&registries)?
        .flatten()
        .map(|registry| registry.path().join(&package))
        .find(|dir| dir.join("proto/corium.proto").exists())
        .ok_or_else(|| format!("{package} is not unpacked under {}", registries.display()).into())
}

/// The version `lock` (a `Cargo.lock`) gives package `name`.
fn locked_version(lock: &str, name: &str) -> Option<String> {
    let wanted = format!("name = \"{name}\"");
    let mut lines = lock.lines();
    lines.find(|line| line.trim() == wanted)?;
    let version = lines.next()?.trim().strip_prefix("version = \"")?;
    Some(version.trim_end_matches('"').to_owned())
}
