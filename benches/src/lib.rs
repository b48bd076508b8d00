//! Benches of gpufill.
