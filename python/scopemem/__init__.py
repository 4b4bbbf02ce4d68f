"""scopemem's Python side, shipped in the `scopemem` wheel beside the binary: what every chat
framework's plugin needs to talk to a scopemem server, so the AstrBot and NoneBot2 plugins (and
a plugin for any other framework) share one copy of it.

- `scopemem.client`: the JSON client over scopemem's HTTP API (`ScopememClient`,
  `ScopememDown`, `error_code`, `error_text`);
- `scopemem.supervisor`: the `scopemem serve` a plugin runs itself, restarted with backoff and
  never outliving the bot (`Supervisor`);
- `scopemem.reflection`: the inline `<memory_reflection>` block a reply may end with
  (`REFLECTION_INSTRUCTIONS`, `split_reflection`, `clean_reflection`);
- `scopemem.config_file`: scopemem's JSON config file, read and written atomically
  (`read`, `write_atomically`, `valid_scope_name`);
- `scopemem.forget`: the two-step `/scopemem forget` a chat command runs (ask, then confirm
  within a minute; `ForgetConfirmations`);
- `scopemem.people`: what a chat keeps of one member (`me_text`, `/scopemem me`) and their
  two-step "forget me" everywhere on the platform (`ForgetMeConfirmations`,
  `/scopemem forget me`).

Each takes the framework's logger (anything with `info`, `warning` and `error` taking one
string: a `logging.Logger`, loguru's `logger`); without one it logs to `logging` as
"scopemem". Nothing here logs memory content. Standard library and httpx only; Python 3.9+.
docs/api.md ("Python package") documents it.
"""
