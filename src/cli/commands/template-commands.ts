/**
 * `space template list|info|build|delete|tag`: templates over ECW (list, delete, tags,
 * builds: what the e2b SDK's `Template` calls) and Native `/v1/templates/{id}` (one
 * template with its builds and aliases).
 */
import type { Command } from "commander";
import { SpaceError } from "../../core/errors.ts";
import { contextOf, type CommandContext } from "../client/context.ts";
import { printFields, printJson, printLine, printTable } from "../client/output.ts";
import { positiveInt } from "./sandbox-commands.ts";

interface ListedTemplate {
  templateID: string;
  buildID: string;
  aliases: string[];
  public: boolean;
  buildStatus: string;
  buildCount: number;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  createdAt: string;
  updatedAt: string;
}

/** A template's id from its id or name (`name[:tag]`: the tag is not part of the template). */
async function templateIdOf(ctx: CommandContext, ref: string): Promise<string> {
  const name = ref.split(":")[0]!;
  const list = await ctx.client.ecw<ListedTemplate[]>("GET", "/templates");
  const hit = list.find((t) => t.templateID === name) ?? list.find((t) => t.aliases.includes(name));
  if (!hit) throw new SpaceError("not_found", `no template has the id or name ${name} (space template list shows them)`);
  return hit.templateID;
}

export function registerTemplateCommands(program: Command): void {
  const template = program
    .command("template")
    .description("templates: list, inspect, build from a Dockerfile, delete, tag")
    .addHelpText(
      "after",
      `
Examples:
  $ space template build ./my-template --name my-env
  $ space template list
  $ space template tag my-env stable
  $ space template delete my-env`,
    );

  template
    .command("list")
    .alias("ls")
    .description("list the templates you can use")
    .action(async (_o: unknown, cmd: Command) => {
      const ctx = contextOf(cmd);
      const list = await ctx.client.ecw<ListedTemplate[]>("GET", "/templates");
      if (ctx.out.json) return printJson(list);
      printTable(
        ["NAME", "ID", "STATUS", "BUILDS", "VCPU", "MEMORY", "DISK", "UPDATED"],
        list.map((t) => [t.aliases.join(", "), t.templateID, t.buildStatus, t.buildCount, t.cpuCount, `${t.memoryMB} MiB`, `${t.diskSizeMB} MiB`, t.updatedAt]),
        "no templates of yours yet (the built-in `base` is always there; space template build makes one)",
      );
    });

  template
    .command("info <template>")
    .alias("get")
    .description("show one template (id or name) with its builds and tags")
    .action(async (ref: string, _o: unknown, cmd: Command) => {
      const ctx = contextOf(cmd);
      const t = await ctx.client.native<Record<string, unknown>>("GET", `/v1/templates/${encodeURIComponent(ref.split(":")[0]!)}`);
      if (ctx.out.json) return printJson(t);
      printFields(t);
    });

  template
    .command("build <dir>")
    .description("build a template from <dir>/Dockerfile (FROM base|<template>|oci-archive:<path>, RUN, COPY, ENV, WORKDIR, USER, CMD)")
    .requiredOption("--name <name>", "template name[:tag]")
    .option("--file <file>", "Dockerfile name in <dir>", "Dockerfile")
    .option("--force", "rebuild every step (ignore the layer cache)")
    .option("--vcpu <n>", "vCPUs of the build and of its sandboxes", positiveInt("--vcpu"))
    .option("--memory-mib <n>", "memory (MiB) of the build and of its sandboxes", positiveInt("--memory-mib"))
    .addHelpText(
      "after",
      `
Build logs and progress go to stderr; stdout gets {"templateID", "buildID"} as JSON.

Example:
  $ mkdir -p t && printf 'FROM base\\nRUN echo hi > /hi.txt\\n' > t/Dockerfile
  $ space template build ./t --name my-env`,
    )
    .action(async (dir: string, o: { name: string; file: string; force?: boolean; vcpu?: number; memoryMib?: number }, cmd: Command) => {
      const ctx = contextOf(cmd);
      const { runTemplateBuild } = await import("../template.ts");
      const r = await runTemplateBuild({
        dir,
        name: o.name,
        file: o.file,
        apiUrl: ctx.client.apiUrl,
        apiKey: ctx.client.apiKey(),
        ...(o.force ? { force: true } : {}),
        ...(o.vcpu !== undefined ? { cpuCount: o.vcpu } : {}),
        ...(o.memoryMib !== undefined ? { memoryMB: o.memoryMib } : {}),
      });
      printJson(r);
    });

  template
    .command("delete <template>")
    .alias("rm")
    .description("delete a template (id or name) and its builds")
    .action(async (ref: string, _o: unknown, cmd: Command) => {
      const ctx = contextOf(cmd);
      const id = await templateIdOf(ctx, ref);
      await ctx.client.ecw("DELETE", `/templates/${encodeURIComponent(id)}`);
      if (ctx.out.json) return printJson({ deleted: id });
      printLine(`deleted template ${ref} (${id})`);
    });

  template
    .command("tag <target> <tags...>")
    .description("point tags at the build <target> names (name: its newest build, name:tag: that tag's); --remove takes them off")
    .option("--remove", "remove the tags from <target>'s template instead")
    .addHelpText("after", "\nExamples:\n  $ space template tag my-env stable v1\n  $ space template tag my-env:stable production\n  $ space template tag my-env v1 --remove")
    .action(async (target: string, tags: string[], o: { remove?: boolean }, cmd: Command) => {
      const ctx = contextOf(cmd);
      if (o.remove) {
        await ctx.client.ecw("DELETE", "/templates/tags", { name: target.split(":")[0], tags });
        if (ctx.out.json) return printJson({ name: target.split(":")[0], removed: tags });
        return printLine(`removed ${tags.join(", ")} from ${target.split(":")[0]}`);
      }
      const r = await ctx.client.ecw<{ buildID: string; tags: string[] }>("POST", "/templates/tags", { target, tags });
      if (ctx.out.json) return printJson(r);
      printLine(`${r.tags.join(", ")} → build ${r.buildID}`);
    });
}
