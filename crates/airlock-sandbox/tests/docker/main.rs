//! Integration tests of the Docker tier against a real daemon (no mocks):
//! the one named by `AIRLOCK_TEST_DOCKER_SOCKET`, or one this test process
//! starts with `scripts/dockerd-lab.sh` in a temporary directory (stopped
//! once the process is gone). The base image is made offline with
//! `scripts/docker-image.sh`. Where Docker cannot run, each test prints a
//! loud SKIP saying why; with `AIRLOCK_TEST_DOCKER_REQUIRED=1` (CI) it fails
//! instead.
mod confinement;
mod files;
mod lab;
mod lifecycle;
#[path = "../native/util.rs"]
mod util;
