export default async function factory() {
  await new Promise((resolve) => setTimeout(resolve, 5));
  return [{ name: "later", description: "From a promise", parameters: { type: "object" }, execute: async () => "later" }];
}
