//! Nothing: this package only pins the `ibverbs` crate (see Cargo.toml).
