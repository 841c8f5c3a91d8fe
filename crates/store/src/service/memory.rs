//! The in-memory service store: the same invariants as SQLite, nothing on disk (tests).

use super::leases::{corrected_cost, corrected_tokens, LeaseChange, StoredLease, StoredSpend};
use super::types::{
    AuditKind, AuditRecord, KeyRole, ServiceStore, ServiceStoreError, StoredKey, StoredProfile,
};

/// A [`ServiceStore`] in memory.
#[derive(Debug, Default)]
pub struct MemoryServiceStore {
    keys: Vec<StoredKey>,
    profiles: Vec<StoredProfile>,
    audit: Vec<AuditRecord>,
    leases: Vec<StoredLease>,
    spend: Vec<StoredSpend>,
}

impl MemoryServiceStore {
    fn spend_line(&mut self, lease: &StoredLease, budget_id: &str) -> &mut StoredSpend {
        let found = self.spend.iter().position(|s| {
            s.workspace_id == lease.workspace_id
                && s.budget_id == budget_id
                && s.principal_id == lease.principal_id
                && s.provider_id == lease.provider_id
        });
        let index = match found {
            Some(index) => index,
            None => {
                self.spend.push(StoredSpend {
                    workspace_id: lease.workspace_id.clone(),
                    budget_id: budget_id.to_owned(),
                    principal_id: lease.principal_id.clone(),
                    provider_id: lease.provider_id.clone(),
                    attempts: 0,
                    tokens: 0,
                    cost_usd: 0.0,
                });
                self.spend.len() - 1
            }
        };
        &mut self.spend[index]
    }

    fn apply(&mut self, change: &LeaseChange) {
        match change {
            LeaseChange::Granted(lease) => {
                if let Some(budget_id) = &lease.budget_id {
                    let line = self.spend_line(lease, budget_id);
                    line.attempts = line.attempts.saturating_add(lease.attempts);
                    line.tokens = line.tokens.saturating_add(lease.tokens.unwrap_or(0));
                    line.cost_usd += lease.cost_usd.unwrap_or(0.0);
                }
                self.leases.push(lease.clone());
            }
            LeaseChange::Released {
                token,
                actual_tokens,
                actual_cost_usd,
            } => {
                let Some(index) = self.leases.iter().position(|l| &l.token == token) else {
                    return;
                };
                let lease = self.leases.remove(index);
                let Some(budget_id) = &lease.budget_id else {
                    return;
                };
                if actual_tokens.is_none() && actual_cost_usd.is_none() {
                    return;
                }
                let line = self.spend_line(&lease, budget_id);
                if let Some(actual) = actual_tokens {
                    line.tokens = corrected_tokens(line.tokens, lease.tokens, *actual);
                }
                if let Some(actual) = actual_cost_usd {
                    line.cost_usd = corrected_cost(line.cost_usd, lease.cost_usd, *actual);
                }
            }
            LeaseChange::BudgetReleased {
                workspace_id,
                budget_id,
            } => {
                self.spend
                    .retain(|s| !(&s.workspace_id == workspace_id && &s.budget_id == budget_id));
                for lease in &mut self.leases {
                    if &lease.workspace_id == workspace_id
                        && lease.budget_id.as_ref() == Some(budget_id)
                    {
                        lease.budget_id = None;
                    }
                }
            }
        }
    }
}

impl MemoryServiceStore {
    pub fn new() -> Self {
        Self::default()
    }
}

impl ServiceStore for MemoryServiceStore {
    fn insert_key(&mut self, key: &StoredKey) -> Result<(), ServiceStoreError> {
        if self.keys.iter().any(|k| k.hash == key.hash) {
            return Err(ServiceStoreError::DuplicateKey);
        }
        self.keys.push(key.clone());
        Ok(())
    }

    fn keys(&self) -> Result<Vec<StoredKey>, ServiceStoreError> {
        Ok(self.keys.clone())
    }

    fn revoke_key(
        &mut self,
        workspace_id: &str,
        hash: &str,
        record: &AuditRecord,
    ) -> Result<bool, ServiceStoreError> {
        let Some(index) = self.keys.iter().position(|k| {
            k.hash == hash
                && k.role == KeyRole::Principal
                && k.workspace_id.as_deref() == Some(workspace_id)
        }) else {
            return Ok(false);
        };
        self.keys.remove(index);
        self.audit.push(record.clone());
        Ok(true)
    }

    fn has_admin_key(&self) -> Result<bool, ServiceStoreError> {
        Ok(self.keys.iter().any(|k| k.role == KeyRole::Admin))
    }

    fn append_profile(
        &mut self,
        profile: &StoredProfile,
        change: Option<&AuditRecord>,
    ) -> Result<(), ServiceStoreError> {
        self.profiles.push(profile.clone());
        if let Some(change) = change {
            self.audit.push(change.clone());
        }
        Ok(())
    }

    fn profiles(&self) -> Result<Vec<StoredProfile>, ServiceStoreError> {
        Ok(self.profiles.clone())
    }

    fn append_audit(&mut self, records: &[AuditRecord]) -> Result<(), ServiceStoreError> {
        self.audit.extend_from_slice(records);
        Ok(())
    }

    fn audit(
        &self,
        workspace_id: &str,
        kind: AuditKind,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, ServiceStoreError> {
        let matching: Vec<&AuditRecord> = self
            .audit
            .iter()
            .filter(|r| r.workspace_id == workspace_id && r.kind == kind)
            .collect();
        let skip = matching.len().saturating_sub(limit);
        Ok(matching.into_iter().skip(skip).cloned().collect())
    }

    fn apply_lease_changes(&mut self, changes: &[LeaseChange]) -> Result<(), ServiceStoreError> {
        for change in changes {
            self.apply(change);
        }
        Ok(())
    }

    fn held_leases(&self) -> Result<Vec<StoredLease>, ServiceStoreError> {
        Ok(self.leases.clone())
    }

    fn budget_spend(&self) -> Result<Vec<StoredSpend>, ServiceStoreError> {
        Ok(self.spend.clone())
    }
}
