//! Both resolvers (openat2 and the emulated walk) give identical answers on
//! the whole attack matrix: same status, reason, exit code and digest.

use crate::attacks::{cases, run_case};

#[test]
fn openat2_and_emulated_agree_on_every_case() {
    let openat2_works = {
        let p = crate::util::Project::new().resolver("openat2");
        let run = p.run(&["tools", "list"]);
        run.code == 0
    };
    if !openat2_works {
        eprintln!("openat2 is unavailable here; the emulated resolver alone is exercised");
    }
    for c in cases() {
        let (_e, emulated) = run_case(&c, Some("emulated"));
        if !openat2_works {
            continue;
        }
        let (_k, kernel) = run_case(&c, Some("openat2"));
        let key = |r: &crate::util::Run| {
            (
                r.code,
                r.status().to_owned(),
                r.reason().to_owned(),
                r.envelope["descriptor"]["command_boundary"]["filesystem"]["reads"].clone(),
            )
        };
        assert_eq!(key(&emulated), key(&kernel), "{}: resolvers disagree", c.name);
    }
}
