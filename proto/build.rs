//! Compiles the fleet's `.proto` files with `protox` (pure Rust, no `protoc`),
//! exactly as `corium-protocol` does.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/corium/fleet/v1/fleet.proto",
        "proto/google/rpc/status.proto",
        "proto/google/rpc/error_details.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
