//! Compiles the fleet's `.proto` files with `protox` (pure Rust, no `protoc`),
//! exactly as `corium-protocol` does, and writes two descriptor sets for
//! `methods.rs`: the fleet's, and Corium's own (`corium.v1`, compiled from
//! the `corium.proto` inside the `corium-protocol` package this build uses,
//! found with `cargo metadata`), so every method either tier serves, and
//! whether it streams, comes from the service definitions themselves.

use std::path::PathBuf;

use prost::Message as _;

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
    std::fs::write(out.join("fleet_descriptors.bin"), descriptors.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(descriptors)?;

    let corium = corium_protocol_dir()?;
    let corium_proto = corium.join("proto/corium.proto");
    println!("cargo:rerun-if-changed={}", corium_proto.display());
    let corium_descriptors = protox::compile([corium_proto.as_path()], [corium.join("proto")])?;
    std::fs::write(
        out.join("corium_descriptors.bin"),
        corium_descriptors.encode_to_vec(),
    )?;
    Ok(())
}

/// The directory of the `corium-protocol` package this build resolves.
fn corium_protocol_dir() -> Result<PathBuf, Box<dyn std::error::Error>> {
    let cargo = std::env::var("CARGO")?;
    let output = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline"])
        .current_dir(std::env::var("CARGO_MANIFEST_DIR")?)
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let manifest = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|package| package["name"] == "corium-protocol")
        .and_then(|package| package["manifest_path"].as_str())
        .ok_or("cargo metadata lists no corium-protocol package")?;
    Ok(PathBuf::from(manifest)
        .parent()
        .ok_or("corium-protocol's manifest has no directory")?
        .to_path_buf())
}
