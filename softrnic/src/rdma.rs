//! `rdma`, iproute2's RDMA command, as the programs `softrnic exec` runs see it. The real one
//! asks the kernel over NETLINK_RDMA, which knows nothing of softrnic; rdma-core's own tests
//! (56 and later) run `rdma link show -j` to find a port's interface. So `exec` puts this in
//! front of it on PATH (the `softrnic` command, called `rdma`), and it answers `rdma link
//! [show]` and `rdma dev [show]`, in text or JSON (`-j`), for softrnic's devices as the kernel
//! does for rxe's, with the names and interfaces of the `/sys/class/infiniband` view. Anything
//! else it refuses with a message saying so.

use serde_json::json;

use crate::view::{self, Device};

/// What was asked: an object and a device (or DEV/PORT) to show, as text or JSON.
#[derive(Debug, PartialEq, Eq)]
struct Ask {
    object: Object,
    filter: Option<String>,
    json: bool,
    pretty: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum Object {
    Link,
    Dev,
}

/// iproute2's syntax: options anywhere (getopt permutes them), then OBJECT [show|list] [DEV].
fn parse(args: &[String]) -> Result<Ask, String> {
    let (mut json, mut pretty) = (false, false);
    let mut words = Vec::new();
    for a in args {
        match a.as_str() {
            "-j" | "-json" | "--json" => json = true,
            "-p" | "-pretty" | "--pretty" => pretty = true,
            "-d" | "-details" | "--details" => {}
            w if w.starts_with('-') => return Err(format!("option {w} is not answered here")),
            w => words.push(w),
        }
    }
    let object = match words.first() {
        Some(&"link") => Object::Link,
        Some(&"dev") | Some(&"device") => Object::Dev,
        Some(w) => return Err(format!("object {w:?} is not answered here")),
        None => return Err("name an object: link or dev".into()),
    };
    let rest = &words[1..];
    match rest.first() {
        None | Some(&"show") | Some(&"list") => {}
        // `rdma link add NAME type rxe netdev IF` and the like change the kernel's devices.
        Some(c) => {
            return Err(format!(
                "`{c}` is not answered here: softrnic's devices are made with `softrnic up`"
            ));
        }
    }
    let filter = match rest {
        [] | [_] => None,
        [_, f] => Some(f.to_string()),
        _ => return Err(format!("too many words: {}", rest.join(" "))),
    };
    Ok(Ask {
        object,
        filter,
        json,
        pretty,
    })
}

/// The interface's index, as the kernel numbers it (0 if it cannot be read).
fn ifindex(netdev: &str) -> u64 {
    std::fs::read_to_string(format!("/sys/class/net/{netdev}/ifindex"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// What `rdma` prints for `ask` about `devices` (in `ibv_get_device_list`'s order, which
/// gives each its index).
fn render(ask: &Ask, devices: &[Device]) -> Result<String, String> {
    let mut rows = Vec::new();
    let mut lines = Vec::new();
    for (index, d) in devices.iter().enumerate() {
        let name = &d.info.name;
        let netdev = view::netdev(d);
        match ask.object {
            Object::Link => {
                let wanted = ask.filter.as_deref();
                if wanted.is_some_and(|f| f != name && f != format!("{name}/1")) {
                    continue;
                }
                let state = view::state_name(d);
                let phys = if view::link_up(d) {
                    "LINK_UP"
                } else {
                    "DISABLED"
                };
                let mut row = json!({
                    "ifindex": index, "ifname": name, "port": 1,
                    "state": state, "physical_state": phys,
                });
                let mut line = format!("link {name}/1 state {state} physical_state {phys} ");
                if let Some(n) = netdev {
                    row["netdev"] = json!(n);
                    row["netdev_index"] = json!(ifindex(n));
                    line.push_str(&format!("netdev {n} "));
                }
                rows.push(row);
                lines.push(line);
            }
            Object::Dev => {
                if ask.filter.as_deref().is_some_and(|f| f != name) {
                    continue;
                }
                let guid = view::node_guid(d);
                rows.push(json!({
                    "ifindex": index, "ifname": name, "node_type": "ca",
                    "fw": softrnic_client::proto::FW_VER, "node_guid": guid,
                    "sys_image_guid": guid,
                }));
                lines.push(format!(
                    "{index}: {name}: node_type ca fw {} node_guid {guid} sys_image_guid {guid} ",
                    softrnic_client::proto::FW_VER
                ));
            }
        }
    }
    if let Some(f) = &ask.filter
        && rows.is_empty()
    {
        return Err(format!("no device {f}"));
    }
    Ok(match (ask.json, ask.pretty) {
        (true, false) => format!("{}\n", serde_json::Value::Array(rows)),
        (true, true) => format!(
            "{}\n",
            serde_json::to_string_pretty(&rows).expect("JSON values")
        ),
        (false, _) => lines.iter().map(|l| format!("{l}\n")).collect(),
    })
}

/// Answers `rdma ARGS` for the devices `devices` gives (asked only for a question this
/// answers): what to print, or why not.
pub fn answer(
    args: &[String],
    devices: impl FnOnce() -> Result<Vec<Device>, String>,
) -> Result<String, String> {
    let ask = parse(args)?;
    render(&ask, &devices()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::tests::device;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn link_show_json_reads_as_rdma_core_56s_tests_parse_it() {
        let devices = || {
            Ok(vec![
                device("srnic0", Some("lo"), vec![]),
                device("srnic1", None, vec![]),
            ])
        };
        let out = answer(&args("link show -j"), devices).unwrap();
        let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(rows[0]["ifname"], "srnic0");
        assert_eq!(rows[0]["port"], 1);
        assert_eq!(rows[0]["netdev"], "lo");
        assert_eq!(rows[0]["state"], "ACTIVE");
        assert_eq!(rows[1]["ifindex"], 1);
        // A device with no interface has no netdev (rdma-core's tests then look in /sys).
        assert!(rows[1].get("netdev").is_none());
        // Options anywhere, as getopt permutes them.
        assert_eq!(answer(&args("-j link"), devices).unwrap(), out);
    }

    #[test]
    fn text_and_filters_are_iproute2s() {
        let devices = || {
            Ok(vec![
                device("srnic0", Some("lo"), vec![]),
                device("srnic1", None, vec![]),
            ])
        };
        let link = answer(&args("link show srnic0/1"), devices).unwrap();
        assert_eq!(
            link,
            "link srnic0/1 state ACTIVE physical_state LINK_UP netdev lo \n"
        );
        let dev = answer(&args("dev"), devices).unwrap();
        assert!(dev.starts_with("0: srnic0: node_type ca fw "), "{dev}");
        assert!(dev.contains("\n1: srnic1: "), "{dev}");
        assert_eq!(
            answer(&args("link show srnic7"), devices).unwrap_err(),
            "no device srnic7"
        );
    }

    #[test]
    fn what_changes_the_kernels_devices_is_refused_with_why() {
        // Refused before the daemon is asked anything.
        let none = || -> Result<Vec<Device>, String> { panic!("not asked") };
        let e = answer(&args("link add rxe0 type rxe netdev eth0"), none).unwrap_err();
        assert!(e.contains("softrnic up"), "{e}");
        assert!(answer(&args("resource show"), none).is_err());
        assert!(answer(&args("-x link"), none).is_err());
    }
}
