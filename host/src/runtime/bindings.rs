//! Host bindings generated from `wit/` (the one source of truth for the contract).

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
    imports: { default: async | trappable },
    exports: { default: async },
});
