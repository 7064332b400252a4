//! `airlock-broker`: the filesystem broker `airlock isolated` starts for each
//! submission, from a sealed copy of this binary. Everything is in
//! [`airlock_broker`]; it confines itself before it reads a byte.
fn main() {
    airlock_broker::main()
}
