//! The settings' flags and `SPILLWAY_*` variables, made from the settings table
//! (`spillway_server::config::SETTINGS`): one flag per row, named from the row, with its
//! format, meaning and section; nothing here names a setting. `serve` and `config` take
//! them all, `check` and `bench` the Redis ones.

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};
use spillway_server::config::{Kind, Origin, Partial, SETTINGS, Setting};

/// Which settings a command takes as flags.
pub trait Selection {
    fn takes(s: &Setting) -> bool;
}

/// Every setting (`serve`, `config`).
#[derive(Debug, Clone, Default)]
pub struct All;

/// How to reach a Redis store beside its URL: TLS files and credentials (`check`,
/// `bench`).
#[derive(Debug, Clone, Default)]
pub struct Redis;

impl Selection for All {
    fn takes(_: &Setting) -> bool {
        true
    }
}

impl Selection for Redis {
    fn takes(s: &Setting) -> bool {
        s.name.starts_with("redis_")
    }
}

/// The settings the command line gave, each with where it came from.
#[derive(Debug, Clone, Default)]
pub struct SettingFlags<S> {
    pub given: Partial,
    selection: std::marker::PhantomData<S>,
}

fn rows<S: Selection>() -> impl Iterator<Item = (&'static Setting, String)> {
    SETTINGS
        .iter()
        .filter(|s| S::takes(s))
        .filter_map(|s| s.flag().map(|flag| (s, flag)))
}

fn switch_id(flag: &str) -> String {
    format!("switch-{flag}")
}

impl<S: Selection> Args for SettingFlags<S> {
    fn augment_args(mut cmd: Command) -> Command {
        for (s, flag) in rows::<S>() {
            let heading = format!("Settings ({})", s.section);
            let mut arg = Arg::new(s.name)
                .long(flag)
                .env(s.env())
                .value_name(s.format)
                .help(if s.default.is_empty() {
                    s.help.to_owned()
                } else {
                    format!("{} [default: {}]", s.help, s.default)
                })
                .help_heading(heading.clone());
            match s.kind {
                Kind::Bool => {
                    arg = arg
                        .num_args(0..=1)
                        .require_equals(true)
                        .default_missing_value("true");
                }
                Kind::List => arg = arg.action(ArgAction::Append).value_delimiter(','),
                _ => {}
            }
            cmd = cmd.arg(arg);
            for (switch, value) in s.switches {
                cmd = cmd.arg(
                    Arg::new(switch_id(switch))
                        .long(*switch)
                        .env(Setting::switch_env(switch))
                        .action(ArgAction::SetTrue)
                        .help(format!(
                            "the same as --{}={value}",
                            s.name.replace('_', "-")
                        ))
                        .help_heading(heading.clone()),
                );
            }
        }
        cmd
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl<S: Selection> FromArgMatches for SettingFlags<S> {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut given = Partial::default();
        let origin = |id: &str, flag: &str, env: String| match m.value_source(id) {
            Some(ValueSource::EnvVariable) => Origin::Env(env),
            _ => Origin::Flag(format!("--{flag}")),
        };
        for (s, flag) in rows::<S>() {
            if let Some(values) = m.get_many::<String>(s.name) {
                let v: Vec<&str> = values.map(String::as_str).collect();
                let at = origin(s.name, &flag, s.env());
                given
                    .set(s.name, v.join(","), at)
                    .expect("a row of the table");
            }
            for (switch, value) in s.switches {
                let id = switch_id(switch);
                if m.get_flag(&id) {
                    let at = origin(&id, switch, Setting::switch_env(switch));
                    given.set(s.name, *value, at).expect("a row of the table");
                }
            }
        }
        Ok(SettingFlags {
            given,
            selection: std::marker::PhantomData,
        })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl SettingFlags<Redis> {
    /// The store settings these flags describe, over the defaults (`check`, `bench`).
    pub fn store(&self) -> anyhow::Result<spillway_server::config::Store> {
        use spillway_server::config::Profile;
        let config = Partial::defaults(Profile::Native)
            .merge(self.given.clone())
            .build()?;
        Ok(config.store)
    }

    /// The Redis access these flags describe, alone.
    pub fn access(&self) -> anyhow::Result<spillway_redis::Access> {
        Ok(self.store()?.redis)
    }
}
