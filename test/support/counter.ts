/**
 * A counter process for state-survival tests (suspend/restore, fork): increments a number
 * in `/home/user/<name>` every 50 ms, written by rename so a reader never sees it truncated.
 * A unique `name` also makes its processes countable on the host.
 */
export function counterScript(name = "counter") {
  return {
    path: `/home/user/${name}.py`,
    source: `import os, time
i = 0
while True:
    i += 1
    with open('/home/user/${name}.tmp', 'w') as f:
        f.write(str(i))
    os.replace('/home/user/${name}.tmp', '/home/user/${name}')
    time.sleep(0.05)
`,
    value: `/home/user/${name}`,
    start: `nohup python3 /home/user/${name}.py >/dev/null 2>&1 &`,
  };
}
