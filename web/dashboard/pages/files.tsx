// The sandbox's files: list a directory, upload into it, download a file (envd /files).
import { useEffect, useState } from "preact/hooks";
import { download, listDir, upload, type EnvdTarget, type Entry } from "../envd.ts";
import { Loaded } from "../ui.tsx";

export function Files({ target }: { target: EnvdTarget }) {
  const [dir, setDir] = useState("/home/user");
  const [typed, setTyped] = useState(dir);
  const [entries, setEntries] = useState<Entry[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    if (!target.accessToken) return;
    setEntries(null);
    listDir(target, dir).then(
      (e) => (setEntries(e.sort((a, b) => a.name.localeCompare(b.name))), setError(null)),
      (e: Error) => setError(e.message),
    );
  }, [dir, tick, target.accessToken]);
  const save = async (path: string, name: string) => {
    const blob = await download(target, path);
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = name;
    document.body.append(a);
    a.click();
    a.remove();
    // Revoked later: the download reads the URL after the click returns.
    setTimeout(() => URL.revokeObjectURL(a.href), 60_000);
  };
  const parent = dir.replace(/\/[^/]+\/?$/, "") || "/";
  return (
    <section aria-label="Files">
      <form
        class="inline"
        onSubmit={(e) => {
          e.preventDefault();
          setDir(typed);
          // Opening the same directory again re-reads it.
          setTick((t) => t + 1);
        }}
      >
        <label>
          Directory
          <input value={typed} onInput={(e) => setTyped(e.currentTarget.value)} />
        </label>
        <button type="submit">Open</button>
      </form>
      <label class="upload">
        Upload into {dir}
        <input
          type="file"
          multiple
          onChange={async (e) => {
            const files = Array.from(e.currentTarget.files ?? []);
            setError(null);
            try {
              for (const f of files) await upload(target, `${dir.replace(/\/$/, "")}/${f.name}`, f);
              setNotice(`uploaded ${files.map((f) => f.name).join(", ")}`);
              setTick((t) => t + 1);
            } catch (err) {
              setError((err as Error).message);
            }
          }}
        />
      </label>
      <p role="status">{notice}</p>
      <Loaded value={entries} error={error}>
        {(entries) => (
            <table aria-label={`Files in ${dir}`}>
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Size</th>
                  <th scope="col">Permissions</th>
                  <th scope="col">Action</th>
                </tr>
              </thead>
              <tbody>
                {dir !== "/" ? (
                  <tr>
                    <td>
                      <button type="button" class="link" onClick={() => (setDir(parent), setTyped(parent))}>
                        ..
                      </button>
                    </td>
                    <td />
                    <td />
                    <td />
                  </tr>
                ) : null}
                {entries.map((f) => (
                  <tr key={f.path} data-file={f.name}>
                    <td>
                      {f.type === "FILE_TYPE_DIRECTORY" ? (
                        <button type="button" class="link" onClick={() => (setDir(f.path), setTyped(f.path))}>
                          {f.name}/
                        </button>
                      ) : (
                        f.name
                      )}
                    </td>
                    <td>{String(f.size)}</td>
                    <td>{f.permissions}</td>
                    <td>
                      {f.type === "FILE_TYPE_DIRECTORY" ? null : (
                        <button type="button" onClick={() => save(f.path, f.name).catch((e: Error) => setError(e.message))} aria-label={`Download ${f.name}`}>
                          Download
                        </button>
                      )}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
        )}
      </Loaded>
    </section>
  );
}
