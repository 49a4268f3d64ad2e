module.exports = function factory() {
  return { name: "cjs", description: "module.exports is the factory", parameters: { type: "object" }, execute: () => "cjs" };
};
