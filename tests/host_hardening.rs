//! Root never follows a path the PostgreSQL user controls (issue 29 item 2): the data directory swapped
//! for a link is not emptied through it.
#[path = "support/pg.rs"]
mod pg_support;

use pg_support::PgNode;

/// A re-clone empties the data directory first. Swapped for a link to a folder standing in for `/etc`,
/// the link is refused and the folder keeps every file; the error names the path. Seen failing before the
/// fix: the folder was emptied through the link.
#[test]
fn a_data_directory_swapped_for_a_link_is_not_emptied_through_it() {
    let node = PgNode::new("host-a");
    let etc = node.dir.path().join("etc");
    std::fs::create_dir_all(etc.join("ssl")).unwrap();
    std::fs::write(etc.join("shadow"), "root:x").unwrap();
    std::fs::write(etc.join("ssl/key.pem"), "key").unwrap();
    std::os::unix::fs::symlink(&etc, &node.settings.data_dir).unwrap();
    let result = tenure::pg::ctl::remove_data_dir_contents(&node.settings);
    assert!(
        etc.join("shadow").exists() && etc.join("ssl/key.pem").exists(),
        "the link's target was emptied"
    );
    let e = result.expect_err("a link is refused").to_string();
    assert!(
        e.contains(&node.settings.data_dir.display().to_string()) && e.contains("symbolic link"),
        "{e}"
    );
}
