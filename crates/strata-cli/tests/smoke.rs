mod common;

#[test]
fn put_get_roundtrip_against_real_daemon() {
    let d = common::TestDaemon::start();
    let c = d.client();
    let b = c.bucket("smoke").unwrap();
    b.put("a", b"hello").unwrap();
    assert_eq!(b.get("a").unwrap(), b"hello");
    let st = d.status();
    assert_eq!(st.blobs, 1);
}
