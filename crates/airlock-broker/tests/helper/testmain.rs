//! Test helper (not shipped): the broker exactly as the `airlock-broker`
//! binary of airlock-cli runs it.
fn main() {
    airlock_broker::main()
}
