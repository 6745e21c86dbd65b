//! Host bindings generated from `wit/` (the one source of truth for the contract).

wasmtime::component::bindgen!({
    path: "../wit",
    // The largest world: its imports are the `plugin` world's, and its optional exports
    // (`admission`, `selectors`) are looked up per component, so plugins built for any
    // world load.
    world: "full-plugin",
    imports: { default: async | trappable },
    exports: { default: async },
});
