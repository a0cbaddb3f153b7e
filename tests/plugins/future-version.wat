;; A component built against a future major version of the plugin contract
;; (ferry:plugin@2.0.0): the host must refuse to load it, naming both
;; versions. The tests turn this text into a .wasm with the `wat` crate; it
;; needs no guest toolchain and no bindings of a contract that does not exist.
(component
  (import "ferry:plugin/host@2.0.0" (instance
    (export "now" (func (result s64)))
  ))
)
