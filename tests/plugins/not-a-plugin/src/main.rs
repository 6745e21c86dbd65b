//! A WASI command component: valid wasm, but not a wasmop plugin.
fn main() {
    println!("hello from another world");
}
