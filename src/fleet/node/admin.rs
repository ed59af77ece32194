//! A master's administrative commands, on its fred client: loading the scripts, its identity
//! and the fleet marker, the quarantine record, and the fence counter read during preparation.

use std::time::Duration;

use fred::prelude::{ClientLike, KeysInterface};
use fred::types::CustomCommand;

use super::Node;
use crate::fleet::quarantine::{parse_info, Identity};
use crate::scripts::SCRIPTS;

// === impl Node ===

impl Node {
    /// Loads every script into this master's cache; `false` when it did not answer in time.
    pub(in crate::fleet) async fn load_scripts(&self, timeout: Duration) -> bool {
        let load = async {
            for script in SCRIPTS.all() {
                script.load(&self.client).await?;
            }
            Ok::<_, fred::error::Error>(())
        };
        matches!(tokio::time::timeout(timeout, load).await, Ok(Ok(())))
    }

    /// `INFO server` and the value of the fleet marker `marker` (the `run_id` the server was
    /// made a member under; `None` when absent), within `timeout`.
    pub(in crate::fleet) async fn identify(
        &self,
        marker: &str,
        timeout: Duration,
    ) -> Option<(Identity, Option<String>)> {
        let query = async {
            let info_cmd = CustomCommand::new_static("INFO", None, false);
            let info: String = self.client.custom(info_cmd, vec!["server"]).await?;
            let member: Option<String> = self.client.get(marker).await?;
            Ok::<_, fred::error::Error>((info, member))
        };
        let (info, member) = tokio::time::timeout(timeout, query).await.ok()?.ok()?;
        Some((parse_info(&info)?, member))
    }

    /// The value of an integer key (0 when absent), within `timeout`.
    pub(in crate::fleet) async fn get_counter(&self, key: &str, timeout: Duration) -> Option<u64> {
        let get = self.client.get::<Option<u64>, _>(key);
        let value = tokio::time::timeout(timeout, get).await.ok()?.ok()?;
        Some(value.unwrap_or(0))
    }

    /// Sets the fleet marker `key` to `run_id` (the server process made a member), with no
    /// expiry, within `timeout`.
    pub(in crate::fleet) async fn set_marker(
        &self,
        key: &str,
        run_id: &str,
        timeout: Duration,
    ) -> bool {
        let set = self.client.set::<(), _, _>(key, run_id, None, None, false);
        matches!(tokio::time::timeout(timeout, set).await, Ok(Ok(())))
    }

    /// What is left of a quarantine some process began on this server process (`run_id`):
    /// the expiry of `quarantined` when the key names `run_id`. `Some(None)` when none is
    /// under way; `None` when the master did not answer within `timeout`.
    pub(in crate::fleet) async fn quarantine_left(
        &self,
        quarantined: &str,
        run_id: &str,
        timeout: Duration,
    ) -> Option<Option<Duration>> {
        let query = async {
            let serving: Option<String> = self.client.get(quarantined).await?;
            let left: i64 = self.client.pttl(quarantined).await?;
            Ok::<_, fred::error::Error>((serving, left))
        };
        let (serving, left) = tokio::time::timeout(timeout, query).await.ok()?.ok()?;
        let ours = serving.as_deref() == Some(run_id) && left > 0;
        Some(ours.then(|| Duration::from_millis(left as u64)))
    }

    /// Records that this server (`run_id`) is quarantined for `left` more: the key expires on
    /// the server's clock when the quarantine ends.
    pub(in crate::fleet) async fn set_quarantined(
        &self,
        key: &str,
        run_id: &str,
        left: Duration,
        timeout: Duration,
    ) -> bool {
        let expiry = fred::types::Expiration::PX(left.as_millis().max(1) as i64);
        let set = self
            .client
            .set::<(), _, _>(key, run_id, Some(expiry), None, false);
        matches!(tokio::time::timeout(timeout, set).await, Ok(Ok(())))
    }
}
