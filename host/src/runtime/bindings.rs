//! Host bindings generated from `wit/` (the one source of truth for the contract).

wasmtime::component::bindgen!({
    path: "../wit",
    // The larger world: its imports are the `plugin` world's, and its `admission` export
    // is looked up per component, so plugins built for either world load.
    world: "webhook-plugin",
    imports: { default: async | trappable },
    exports: { default: async },
});
