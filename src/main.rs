//! The `tenure` command line.
fn main() {
    println!("tenure {}", env!("CARGO_PKG_VERSION"));
}
