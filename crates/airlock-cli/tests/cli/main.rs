//! Integration tests: the real `airlock` binary on real files in temp
//! directories. One test binary, many modules (links once).

mod attacks;
mod prepare;
mod race;
mod resolvers;
mod tools;
mod util;
