//! Host bindings generated from `wit/` (the one source of truth for the contract).

wasmtime::component::bindgen!({
    path: "../wit",
    // The largest world: its imports are the `plugin` world's plus `script` (which only
    // the script engine imports), and its optional exports (`admission`, `selectors`,
    // ...) are looked up per component, so plugins built for any world load.
    world: "script-engine",
    imports: { default: async | trappable },
    exports: { default: async },
});
