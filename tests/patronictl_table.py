"""patronictl's own table printer fed tenure's `list -f json` rows: what patronictl 4.1's `list` prints.

stdin: {"title": " Cluster: NAME (SYSID) ", "members": [tenure's JSON rows]}. Columns and cells are built
as patronictl 4.1's `output_members` builds them; the table is printed by this machine's patronictl
(`print_output`, `PatronictlPrettyTable`, prettytable), with 4.1's leave for two columns named `Lag`.
"""
import json
import sys

from patroni import ctl

_validate = ctl.PatronictlPrettyTable._validate_field_names


def _validate_allowing_twins(self, *args, **kwargs):
    try:
        _validate(self, *args, **kwargs)
    except Exception as e:
        if 'Field names must be unique' not in str(e):
            raise


ctl.PatronictlPrettyTable._validate_field_names = _validate_allowing_twins


def hide_long(diffs):
    # patronictl 4.1's format_diff(hide_long=True), line by line
    return '\n'.join(d if len(d) <= 50 else d.split(': ', 1)[0] + ': [hidden - too long]'
                     for d in diffs.split('\n'))


given = json.load(sys.stdin)
members = given['members']
columns = ['Cluster', 'Member', 'Host', 'Role', 'State', 'TL',
           'Receive LSN', 'Receive Lag', 'Replay LSN', 'Replay Lag']
for c in ('Pending restart', 'Pending restart reason', 'Scheduled restart', 'Tags'):
    if any(m.get(c) for m in members):
        columns.append(c)
rows = []
for m in members:
    if m.get('Pending restart reason'):
        m['Pending restart reason'] = hide_long(m['Pending restart reason'])
    rows.append([m.get(c, '') for c in columns])
columns[columns.index('Replay Lag')] = columns[columns.index('Receive Lag')] = 'Lag'
ctl.print_output(columns, rows, {'Receive LSN': 'r', 'Replay LSN': 'r', 'Lag': 'r', 'TL': 'r'},
                 'pretty', given['title'])
