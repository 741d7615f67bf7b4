// Compiles proto/cluster.proto with protox (pure Rust: no protoc needed).
fn main() {
    println!("cargo:rerun-if-changed=proto/cluster.proto");
    let fds =
        protox::compile(["proto/cluster.proto"], ["proto"]).expect("proto/cluster.proto compiles");
    tonic_prost_build::configure()
        .compile_fds(fds)
        .expect("tonic code generation");
}
