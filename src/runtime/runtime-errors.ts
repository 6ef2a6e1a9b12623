import { SpaceError } from "../core/errors.ts";

export const failedPrecondition = (message: string) => new SpaceError("failed_precondition", message);
export const resourceExhausted = (message: string) => new SpaceError("resource_exhausted", message);
