//! Replication slots: which physical slots a member keeps, creates, drops and advances, and the `status` key's
//! `slots` and `retain_slots` the leader publishes (Patroni 4's rules, `permanent_physical_slots`,
//! `_get_members_slots`, `_build_retain_slots`).
//!
//! Wanted on a member that may lead (not `nofailover`): the `config` key's permanent slots, the slot of every
//! other member whose key is present (not `nostream`), and the slots of members gone for less than
//! `member_slots_ttl` (the leader remembers when it last saw each; the others read `status.retain_slots`). A
//! `nofailover` member wants only the slots of members that cascade from it. A member's own slot name is never
//! wanted on itself, so a permanent slot named like a member is not kept on that member.
//!
//! - Created: missing permanent slots, on the leader and on every member that may lead, so that a failover
//!   finds them. A member's own slot is made by that member on its upstream before it streams (`execute.rs`).
//! - Advanced, on replicas: an inactive wanted slot to the leader's published position (`status.slots`), never
//!   past our replay position; so the new primary's copy is at least where the leader last published. On the
//!   leader: the inactive slot of a member that cascades (`replicatefrom`), to the position it publishes.
//! - Dropped: a local physical slot that is not wanted, not active, not matched by `ignore_slots`; never in
//!   pause, never while the `config` key is missing.
//!
//! Logical slots are never touched (tenure does not manage them: `docs/differences.md`). The shell runs the
//! changes in one `Action::SyncSlots`, last in the plan and only when there is something to change, so an idle
//! cluster pays the one `pg_replication_slots` read of its probe and nothing else.
use std::collections::{BTreeMap, BTreeSet};

use super::action::{Action, SlotChanges, StatusKey};
use super::ctx::{Ctx, Local, Plan};
use super::memory::Memory;
use super::observation::{Cluster, LocalSlot, RunningPg};
use super::types::{Lsn, NodeName};

/// PostgreSQL's rule for a replication slot name, as Patroni checks it (`^[a-z0-9_]{1,63}$`). Every slot name
/// read from the store passes it before it reaches PostgreSQL.
pub fn slot_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// `member_slots_ttl` written as text, as Patroni's `parse_int(value, 's')` takes it: a whole number of seconds,
/// or one with a unit (`ms`, `s`, `min`, `h`, `d`), e.g. `30min`. `None` when it is neither.
pub fn ttl_seconds(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n.div_ceil(1000),
        "min" => n.checked_mul(60)?,
        "h" => n.checked_mul(3600)?,
        "d" => n.checked_mul(86_400)?,
        _ => return None,
    };
    Some(secs)
}

/// A member's physical slot name, as Patroni's `slot_name_from_member_name`: lower case, `-` and `.` as `_`,
/// any other character outside `[a-z0-9_]` as `u` and its code point, cut at 63 characters.
pub fn member_slot_name(member: &NodeName) -> String {
    let mut out = String::new();
    for c in member.as_str().to_lowercase().chars() {
        match c {
            'a'..='z' | '0'..='9' | '_' => out.push(c),
            '-' | '.' => out.push('_'),
            other => out.push_str(&format!("u{:04}", other as u32)),
        }
    }
    out.truncate(63);
    out
}

/// Whether we hold the key and run as primary: the one member that publishes `status` and retains slots.
fn leading<'a>(ctx: &'a Ctx, c: &Cluster) -> Option<&'a RunningPg> {
    match ctx.local {
        Local::Primary(r) if c.leader_name() == Some(&ctx.cfg.name) => Some(r),
        _ => None,
    }
}

/// After the plan is chosen: update the leader's retained slots, and append `SyncSlots` when a slot needs a
/// change and the plan leaves PostgreSQL as it is.
pub(crate) fn sync(ctx: &Ctx, mem: &Memory, c: &Cluster, plan: Plan) -> Plan {
    let r = match ctx.local {
        Local::Primary(r) | Local::Replica(r) => r,
        _ => return plan,
    };
    if c.config.missing || plan.actions.iter().any(changes_postgres) {
        return plan;
    }
    let changes = changes(ctx, mem, c, r);
    if changes.is_empty() {
        return plan;
    }
    let mut plan = plan;
    plan.actions.push(Action::SyncSlots(Box::new(changes)));
    plan
}

/// Actions after which the slots we saw are not the server's any more.
fn changes_postgres(a: &Action) -> bool {
    matches!(
        a,
        Action::Stop { .. }
            | Action::Promote
            | Action::StartPrimary
            | Action::StartReplica { .. }
            | Action::StartStandbyLeader(_)
            | Action::StartJob(_)
            | Action::RecoverCrashed
            | Action::Exit
    )
}

/// The leader's memory of member slots: seeded from `status.retain_slots` once per term, each slot of a
/// present member (that exists here) seen now, the ones unseen for `member_slots_ttl` forgotten. Runs before
/// the plan, so that the status written with this cycle's renewal carries it.
pub(crate) fn retain(ctx: &Ctx, mem: &mut Memory, c: &Cluster) {
    let Some(r) = leading(ctx, c) else {
        mem.slots = Default::default();
        return;
    };
    let now = ctx.now;
    let settings = &c.config.slots;
    if !mem.slots.seeded {
        for name in &c.retain_slots {
            mem.slots.seen.insert(name.clone(), now);
        }
        mem.slots.seeded = true;
    }
    let here: BTreeSet<&str> = r.slots.iter().map(|s| s.name.as_str()).collect();
    for m in c.members.iter().filter(|m| !m.tags.nostream) {
        let name = member_slot_name(&m.name);
        if m.name != ctx.cfg.name
            && here.contains(name.as_str())
            && !settings.permanent.contains(&name)
        {
            mem.slots.seen.insert(name, now);
        }
    }
    let ttl = settings.member_ttl_ms;
    mem.slots.seen.retain(|_, at| now.since(*at) < ttl);
}

/// The slot names this member keeps (see the module comment).
fn wanted(ctx: &Ctx, mem: &Memory, c: &Cluster, leader: bool) -> BTreeSet<String> {
    let me = &ctx.cfg.name;
    let mut out = BTreeSet::new();
    let cascades_from_me =
        |tags: &super::observation::Tags| tags.other.get("replicatefrom") == Some(&me.to_string());
    for m in c
        .members
        .iter()
        .filter(|m| &m.name != me && !m.tags.nostream)
    {
        if !ctx.cfg.nofailover || cascades_from_me(&m.tags) {
            out.insert(member_slot_name(&m.name));
        }
    }
    if !ctx.cfg.nofailover {
        out.extend(c.config.slots.permanent.iter().cloned());
        if leader {
            out.extend(mem.slots.seen.keys().cloned());
        } else {
            out.extend(c.retain_slots.iter().cloned());
        }
    }
    out.remove(&member_slot_name(me));
    out
}

fn ignored(c: &Cluster, slot: &LocalSlot) -> bool {
    c.config.slots.ignore.iter().any(|m| m.matches(slot))
}

/// What to create, drop and advance here.
fn changes(ctx: &Ctx, mem: &Memory, c: &Cluster, r: &RunningPg) -> SlotChanges {
    let leader = leading(ctx, c).is_some();
    let wanted = wanted(ctx, mem, c, leader);
    let here: BTreeMap<&str, &LocalSlot> = r.slots.iter().map(|s| (s.name.as_str(), s)).collect();
    let mut out = SlotChanges::default();
    let own = member_slot_name(&ctx.cfg.name);
    // A standby cluster's key holder publishes no slot positions, so copies made there would never move:
    // permanent slots are kept (not dropped) but not created in a standby cluster.
    if !ctx.cfg.nofailover && c.config.standby_cluster.is_none() {
        for name in &c.config.slots.permanent {
            if *name != own && !here.contains_key(name.as_str()) {
                out.create.push(name.clone());
            }
        }
    }
    for s in r.slots.iter().filter(|s| s.physical && !s.active) {
        if ignored(c, s) {
            continue;
        }
        if !wanted.contains(&s.name) {
            if !c.config.pause {
                out.drop.push(s.name.clone());
            }
            continue;
        }
        let Some(at) = s.restart_lsn else {
            continue;
        };
        let target = if leader {
            // The slot of a member that cascades from another member is not used here: it moves by the
            // position that member publishes (Patroni's rule for `replicatefrom` members), so that the
            // primary does not keep its WAL for ever.
            let cascading = c.members.iter().find(|m| {
                member_slot_name(&m.name) == s.name && m.tags.other.contains_key("replicatefrom")
            });
            match cascading.and_then(|m| m.lsn) {
                Some(lsn) => lsn.min(r.lsn),
                None => continue,
            }
        } else if r.role == super::observation::PgRole::Replica {
            // Replicas follow the leader's published positions.
            match c.slots.get(&s.name) {
                Some(target) => (*target).min(r.replay_lsn.unwrap_or(r.lsn)),
                None => continue,
            }
        } else {
            continue;
        };
        if target > at {
            out.advance.push((s.name.clone(), target));
        }
    }
    out
}

/// The `status` the leader publishes with its renewal: its WAL position, its physical slots' positions (its
/// own WAL position under its own slot name, as Patroni 4 does, so that replicas keeping a slot for it advance
/// it) and the member slots it retains. `None` when the store already holds exactly that.
pub(crate) fn status(ctx: &Ctx, mem: &Memory, c: &Cluster, r: &RunningPg) -> Option<Action> {
    let managed = !c.config.slots.permanent.is_empty()
        || !mem.slots.seen.is_empty()
        || !c.slots.is_empty()
        || !c.retain_slots.is_empty()
        || r.slots.iter().any(|s| s.physical);
    if !managed {
        return (c.optime != Some(r.lsn)).then_some(Action::WriteOptime(r.lsn));
    }
    let mut slots: BTreeMap<String, Lsn> = r
        .slots
        .iter()
        .filter(|s| s.physical && !ignored(c, s))
        .filter_map(|s| Some((s.name.clone(), s.restart_lsn?)))
        .collect();
    slots.insert(member_slot_name(&ctx.cfg.name), r.lsn);
    let key = StatusKey {
        optime: r.lsn,
        slots,
        retain_slots: mem.slots.seen.keys().cloned().collect(),
    };
    let same =
        c.optime == Some(key.optime) && c.slots == key.slots && c.retain_slots == key.retain_slots;
    (!same).then(|| Action::WriteStatus(Box::new(key)))
}
