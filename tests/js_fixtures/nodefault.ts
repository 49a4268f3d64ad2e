export const tool = { name: "named", description: "only a named export" };
