//! The ingress's status page (`/status` on its admin port) rendered by a
//! real browser: Debian's Chromium, headless, loads the page, lets its
//! script poll `/status.json`, and dumps the DOM. Every node and each
//! database's owner must be drawn; after a handoff the new owner, and the
//! move, must be. A screenshot must be a real picture, not a blank page.
//!
//! Chromium comes from `make tools` (Debian package `chromium`); without it
//! this test fails, saying so.

use std::path::{Path, PathBuf};
use std::time::Duration;

use corium_fleet_tests::corium;
use corium_fleet_tests::{Backend, Fleet, eventually, http_get};

const DBS: [&str; 3] = ["orders", "ledger", "inventory"];

/// The Chromium binary on `PATH`.
fn chromium() -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|candidate| candidate.is_file())
        .expect("Chromium is not installed: run `make tools` (or `apt-get install -y chromium`)")
}

/// Runs headless Chromium on `url` with a fresh profile, letting the page's
/// script run for 5 s of virtual time, then `output` (`--dump-dom`, or
/// `--screenshot=…`). Bounded by 90 s; returns stdout.
async fn browse(url: &str, output: &[String]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(chromium());
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1280,1000",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(output)
        .arg(url)
        .current_dir(profile.path())
        .kill_on_drop(true);
    let run = tokio::time::timeout(Duration::from_secs(90), command.output())
        .await
        .expect("Chromium finishes within 90 s")
        .expect("Chromium runs");
    assert!(
        run.status.success(),
        "chromium {output:?} {url}: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    String::from_utf8_lossy(&run.stdout).into_owned()
}

/// The page as Chromium rendered it (the DOM after its script ran).
async fn dom(admin: u16) -> String {
    browse(
        &format!("http://127.0.0.1:{admin}/status"),
        &["--dump-dom".to_owned()],
    )
    .await
}

/// The owner of `db` as the page draws it: `data-db="db" data-owner="node"`.
fn drawn_owner(dom: &str, db: &str) -> Option<String> {
    let marker = format!("data-db=\"{db}\" data-owner=\"");
    let start = dom.find(&marker)? + marker.len();
    Some(dom[start..].split('"').next()?.to_owned())
}

/// Runs `corium-fleet ARGS --endpoint ENDPOINT`: whether it succeeded,
/// and all it printed.
async fn cli(args: &[&str], endpoint: &str) -> (bool, String) {
    let run = corium_fleet_tests::cli::run(args, endpoint).await;
    (run.success, format!("{}{}", run.stdout, run.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_draws_every_node_and_the_owner_after_a_handoff() {
    let browser = chromium();
    let (fleet, ingress) = Fleet::builder(Backend::Filesystem).start_with_ingress().await;
    let admin = fleet.ingresses[0].admin;
    for db in DBS {
        assert!(corium::create(&ingress, db).await.unwrap(), "create {db}");
        corium::transact(&ingress, db, &format!("{db}-first"), &[])
            .await
            .unwrap_or_else(|status| panic!("{db}: {status:?}\n{}", fleet.logs()));
    }
    let db = DBS[0];
    let from = corium::placement(&ingress, db).await.owner_id;

    // The JSON the page polls: every database under its owner, once every
    // node's registry record lists what it owns.
    eventually(
        Duration::from_secs(15),
        fleet.with_logs("/status.json shows every owner"),
        async || {
            let (code, body) = http_get(admin, "/status.json").await.ok_or("no answer")?;
            let snapshot: serde_json::Value =
                serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
            let drawn = snapshot["nodes"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|node| node["owned"].as_array().into_iter().flatten())
                .count();
            if code == 200 && drawn == DBS.len() {
                Ok(())
            } else {
                Err(format!("{code} {body}"))
            }
        },
    )
    .await;

    let page = dom(admin).await;
    for node in &fleet.nodes {
        assert!(
            page.contains(&format!("data-node=\"{}\"", node.id)),
            "{} not drawn ({}):\n{page}",
            node.id,
            browser.display()
        );
        assert!(page.contains(&format!("data-zone=\"{}\"", node.zone)), "{page}");
    }
    assert_eq!(drawn_owner(&page, db).as_deref(), Some(from.as_str()), "{page}");

    // Hand it to another candidate: the page draws the new owner and the move.
    let to = corium::placement(&ingress, db)
        .await
        .candidates
        .iter()
        .map(|candidate| candidate.node_id.clone())
        .find(|candidate| *candidate != from)
        .expect("a second candidate");
    let (handed, output) = cli(&["handoff", db, "--to", &to], &ingress).await;
    assert!(handed, "{output}\n{}", fleet.logs());
    let page = eventually(
        Duration::from_secs(30),
        fleet.with_logs(format!("the page draws {db} on {to}")),
        async || {
            let page = dom(admin).await;
            if drawn_owner(&page, db).as_deref() == Some(to.as_str()) {
                Ok(page)
            } else {
                Err(page)
            }
        },
    )
    .await;
    assert!(
        page.contains(&format!(
            "data-move=\"{db}\" data-from=\"{from}\" data-to=\"{to}\""
        )),
        "the move is not listed:\n{page}"
    );

    // A screenshot: a PNG of the window's size that is a picture, not a
    // blank page.
    let shots = tempfile::tempdir().unwrap();
    let shot = shots.path().join("status.png");
    browse(
        &format!("http://127.0.0.1:{admin}/status"),
        &[format!("--screenshot={}", shot.display())],
    )
    .await;
    if let Some(keep) = std::env::var_os("CORIUM_FLEET_KEEP_SCREENSHOT") {
        // To look at it: CORIUM_FLEET_KEEP_SCREENSHOT=/tmp/status.png.
        std::fs::copy(&shot, keep).unwrap();
    }
    check_picture(&shot);
}

/// Checks that `path` is a PNG of the window (1280 wide), more than a few
/// kilobytes, and drawn: many colours, and a good share of the pixels
/// unlike the background.
fn check_picture(path: &Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    assert!(
        bytes.len() > 10_000,
        "{} bytes: too small to be the page",
        bytes.len()
    );
    let image = png::decode(&bytes);
    assert_eq!(image.width, 1280, "the window's width");
    assert!(image.height >= 600, "height {}", image.height);
    let pixels: Vec<&[u8]> = image.pixels.chunks(image.channels).collect();
    let mut colours: Vec<&[u8]> = pixels.clone();
    colours.sort_unstable();
    colours.dedup();
    assert!(colours.len() > 50, "{} colours: a blank page", colours.len());
    // The background is the most common colour; a drawn page has plenty of
    // other pixels (cards, text, chips, the header).
    let background = {
        let mut counts = std::collections::HashMap::new();
        for pixel in &pixels {
            *counts.entry(*pixel).or_insert(0usize) += 1;
        }
        counts.into_iter().max_by_key(|(_, count)| *count).unwrap().0
    };
    let drawn = pixels.iter().filter(|pixel| **pixel != background).count();
    let share = drawn * 100 / pixels.len();
    assert!(
        share >= 10,
        "only {share}% of the pixels differ from the background"
    );
}

/// Just enough PNG to look at a screenshot: 8-bit RGB or RGBA, not
/// interlaced (what Chromium writes).
mod png {
    use std::io::Read as _;

    /// A decoded image: `channels` bytes per pixel, rows top to bottom.
    pub(super) struct Image {
        pub(super) width: usize,
        pub(super) height: usize,
        pub(super) channels: usize,
        pub(super) pixels: Vec<u8>,
    }

    /// Decodes `bytes`.
    ///
    /// # Panics
    /// Anything but an 8-bit RGB(A), non-interlaced PNG.
    pub(super) fn decode(bytes: &[u8]) -> Image {
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
        let (mut at, mut header, mut data) = (8, None, Vec::new());
        while at + 8 <= bytes.len() {
            let length = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            let kind = &bytes[at + 4..at + 8];
            let body = &bytes[at + 8..at + 8 + length];
            match kind {
                b"IHDR" => header = Some(body.to_vec()),
                b"IDAT" => data.extend_from_slice(body),
                b"IEND" => break,
                _ => {}
            }
            at += 12 + length;
        }
        let header = header.expect("an IHDR chunk");
        let width = u32::from_be_bytes(header[0..4].try_into().unwrap()) as usize;
        let height = u32::from_be_bytes(header[4..8].try_into().unwrap()) as usize;
        let (depth, colour, interlace) = (header[8], header[9], header[12]);
        assert_eq!((depth, interlace), (8, 0), "8-bit, not interlaced");
        let channels = match colour {
            2 => 3,
            6 => 4,
            other => panic!("colour type {other}"),
        };
        let mut raw = Vec::new();
        flate2::read::ZlibDecoder::new(data.as_slice())
            .read_to_end(&mut raw)
            .expect("the image data inflates");
        let stride = width * channels;
        assert_eq!(raw.len(), height * (stride + 1), "the image data's size");
        let mut pixels = vec![0u8; height * stride];
        for row in 0..height {
            let filter = raw[row * (stride + 1)];
            let line = &raw[row * (stride + 1) + 1..(row + 1) * (stride + 1)];
            for x in 0..stride {
                let left = if x >= channels {
                    pixels[row * stride + x - channels]
                } else {
                    0
                };
                let up = if row > 0 {
                    pixels[(row - 1) * stride + x]
                } else {
                    0
                };
                let up_left = if row > 0 && x >= channels {
                    pixels[(row - 1) * stride + x - channels]
                } else {
                    0
                };
                let predicted = match filter {
                    0 => 0,
                    1 => left,
                    2 => up,
                    3 => left.midpoint(up),
                    4 => paeth(left, up, up_left),
                    other => panic!("filter {other}"),
                };
                pixels[row * stride + x] = line[x].wrapping_add(predicted);
            }
        }
        Image {
            width,
            height,
            channels,
            pixels,
        }
    }

    fn paeth(a: u8, b: u8, c: u8) -> u8 {
        let p = i16::from(a) + i16::from(b) - i16::from(c);
        let (pa, pb, pc) = (
            (p - i16::from(a)).abs(),
            (p - i16::from(b)).abs(),
            (p - i16::from(c)).abs(),
        );
        if pa <= pb && pa <= pc {
            a
        } else if pb <= pc {
            b
        } else {
            c
        }
    }
}
