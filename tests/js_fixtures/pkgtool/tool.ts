export default () => ({ name: "pkg", description: "A folder with a package.json", parameters: { type: "object" }, execute: () => "pkg" });
