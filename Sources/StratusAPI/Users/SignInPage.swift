import Foundation
import Hummingbird
import StratusCore
import StratusPostgres

/// The hosted sign-in page, `GET /auth/1/{container}/signin/page?request=…`: where
/// AUTHENTICATION_REQUIRED's `redirectURL` sends a web app's user. A web app opens it in a window
/// (CloudKit JS's sign-in button does); the user signs in with a password, or signs up or resets a
/// password by email where the container allows it; the page then posts `{ckWebAuthToken}` to the
/// window that opened it — only at the origin the signed request names — and closes, which is how
/// CloudKit JS's `setUpAuth()`/`whenUserSignsIn()` learn the token. Opened from an email message's
/// link (`#verify=…`, `#reset=…`) it confirms the address or sets the new password.
///
/// Every value the page shows comes from a JSON block whose `<` are escaped and is set as text;
/// its one script runs under a nonce of this answer's Content-Security-Policy.
struct SignInPage<Context: StratusRequestContext>: Sendable {
    let signUps: EmailSignUpStore
    let identities: IdentityStore
    let authenticator: Authenticator
    /// Whether messages can be sent (sign-up and reset are offered only then).
    let sendsEmail: Bool

    func register(on router: Router<Context>) {
        router.get("/auth/1/:container/signin/page") { request, context in try await page(request, context) }
    }

    struct PageSettings: Encodable {
        var container: String
        /// The signed request for the sign-in calls; nil when it is missing or not valid.
        var request: String?
        /// Why the request is not valid, shown instead of the sign-in form.
        var problem: String?
        /// The origin the token goes to; nil: this page's own.
        var origin: String?
        var signUp: String
        var sendsEmail: Bool
        var issuers: [Provider]
    }

    /// A trusted issuer as the page shows it: a button when it has a web client id, else its name.
    struct Provider: Encodable {
        var issuer: String
        var label: String
        var signsIn: Bool
    }

    func page(_ request: Request, _ context: Context) async throws -> Response {
        let container = try AuthRoutes<Context>.containerParameter(context)
        var settings = PageSettings(
            container: container, request: nil, problem: nil, origin: nil, signUp: SignUpMode.off.rawValue, sendsEmail: sendsEmail, issuers: [])
        if let text = request.uri.queryParameters["request"].map(String.init) {
            do {
                let opened = try SignInPageRequest.verify(text, key: authenticator.secretKey, container: container, now: Int64(Date().timeIntervalSince1970))
                settings.request = text
                settings.origin = opened.origin
            } catch {
                settings.problem = error.reason
            }
        } else {
            settings.problem = "Open this page from the app you sign in to."
        }
        settings.signUp = (try? await signUps.mode(container: container, logger: context.logger).rawValue) ?? SignUpMode.off.rawValue
        settings.issuers = ((try? await identities.trustedIssuers(container: container, logger: context.logger)) ?? []).prefix(20).map { issuer in
            Provider(issuer: issuer.issuer, label: ProviderSignIn.label(of: issuer.issuer), signsIn: issuer.webClientID != nil)
        }
        return try HostedPage.response(template: SignInPageTemplate.html, settings: settings)
    }
}

/// The hosted sign-in page's HTML: `{{settings}}` is its JSON settings, `{{nonce}}` its script's nonce.
enum SignInPageTemplate {
    static let html = """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
        <title>Sign in</title>
        <style>
        body{font-family:system-ui,sans-serif;max-width:26rem;margin:2rem auto;padding:0 1rem;color:#222}
        form{display:flex;flex-direction:column;gap:.5rem;margin:1rem 0;padding:1rem;border:1px solid #ddd;border-radius:.5rem}
        input,button{font:inherit;padding:.4rem}.problem{color:#a00}a.provider{display:block;margin:.5rem 0;padding:.5rem;border:1px solid #222;border-radius:.5rem;text-align:center;color:#222;text-decoration:none}.note{color:#555;font-size:.9em}[hidden]{display:none}
        </style></head><body>
        <h1>Sign in</h1>
        <p class="note">to <strong id="container"></strong><span id="for-origin" hidden> for <strong id="origin"></strong></span></p>
        <p id="status" role="status" class="problem"></p>
        <form id="signin" hidden><h2>With a password</h2>
        <input id="login" name="login" autocomplete="username" placeholder="Login or email address" required>
        <input id="password" name="password" type="password" autocomplete="current-password" placeholder="Password" required>
        <button id="signin-button" type="submit">Sign in</button></form>
        <div id="providers" hidden><h2>With an account elsewhere</h2><p id="provider-buttons"></p><p id="app-issuers" class="note" hidden>Sign in from the app with <span id="issuer-list"></span>.</p></div>
        <form id="signup" hidden><h2>Sign up</h2>
        <input id="signup-email" type="email" autocomplete="email" placeholder="Email address" required>
        <input id="signup-password" type="password" autocomplete="new-password" placeholder="Password (8 characters or more)" required>
        <button id="signup-button" type="submit">Send me a link</button></form>
        <form id="reset" hidden><h2>Forgot your password?</h2>
        <input id="reset-email" type="email" autocomplete="email" placeholder="Email address" required>
        <button id="reset-button" type="submit">Send me a link</button></form>
        <form id="verify" hidden><h2>Confirm your address</h2><input id="verify-token" placeholder="Code from the message" required>
        <button id="verify-button" type="submit">Confirm</button></form>
        <form id="newpassword" hidden><h2>Choose a new password</h2><input id="reset-token" placeholder="Code from the message" required>
        <input id="new-password" type="password" autocomplete="new-password" placeholder="New password" required>
        <button id="newpassword-button" type="submit">Set the password</button></form>
        <p id="done" hidden>You are signed in. You can close this window.</p>
        <script type="application/json" id="settings">{{settings}}</script>
        <script nonce="{{nonce}}">
        (function () {
          const s = JSON.parse(document.getElementById('settings').textContent);
          const $ = (id) => document.getElementById(id);
          const base = '/auth/1/' + encodeURIComponent(s.container);
          const status = (text, ok) => { $('status').textContent = text || ''; $('status').className = ok ? 'note' : 'problem'; };
          $('container').textContent = s.container;
          if (s.origin) { $('origin').textContent = s.origin; $('for-origin').hidden = false; }
          async function call(path, body, withRequest) {
            const query = withRequest ? '?ckSignInRequest=' + encodeURIComponent(s.request) : '';
            const response = await fetch(base + path + query, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
            const answer = await response.json().catch(() => ({}));
            if (!response.ok) { throw new Error(answer.reason || ('HTTP ' + response.status)); }
            return answer;
          }
          function handBack(answer) {
            const target = s.origin || window.location.origin;
            if (window.opener && s.request) {
              window.opener.postMessage({ ckWebAuthToken: answer.ckWebAuthToken, ckSession: answer.ckWebAuthToken }, target);
              window.close();
            }
            for (const id of ['signin', 'signup', 'reset', 'verify', 'newpassword', 'providers']) { $(id).hidden = true; }
            $('done').hidden = false;
            status('', true);
          }
          function on(id, run) {
            $(id).addEventListener('submit', async (event) => {
              event.preventDefault();
              $(id + '-button').disabled = true;
              try { await run(); } catch (error) { status(error.message); } finally { $(id + '-button').disabled = false; }
            });
          }
          on('signin', async () => handBack(await call('/signin', { login: $('login').value, password: $('password').value }, true)));
          on('signup', async () => { const a = await call('/signup', { email: $('signup-email').value, password: $('signup-password').value }, true); status(a.message, true); });
          on('reset', async () => { const a = await call('/password/reset', { email: $('reset-email').value }, true); status(a.message, true); });
          on('verify', async () => handBack(await call('/signup/verify', { token: $('verify-token').value.trim() }, false)));
          on('newpassword', async () => handBack(await call('/password/reset/confirm', { token: $('reset-token').value.trim(), password: $('new-password').value }, false)));
          const fragment = new URLSearchParams(window.location.hash.slice(1));
          history.replaceState(null, '', window.location.pathname + window.location.search);
          if (fragment.get('verify')) { $('verify-token').value = fragment.get('verify'); $('verify').hidden = false; return; }
          if (fragment.get('reset')) { $('reset-token').value = fragment.get('reset'); $('newpassword').hidden = false; return; }
          if (!s.request) { status(s.problem); return; }
          $('signin').hidden = false;
          for (const issuer of s.issuers.filter((i) => i.signsIn)) {
            const link = document.createElement('a');
            link.className = 'provider';
            link.textContent = issuer.label;
            link.dataset.issuer = issuer.issuer;
            link.href = base + '/signin/provider?ckSignInRequest=' + encodeURIComponent(s.request) + '&issuer=' + encodeURIComponent(issuer.issuer);
            $('provider-buttons').appendChild(link);
          }
          const fromApp = s.issuers.filter((i) => !i.signsIn).map((i) => i.issuer);
          if (fromApp.length) { $('issuer-list').textContent = fromApp.join(', '); $('app-issuers').hidden = false; }
          if (s.issuers.length) { $('providers').hidden = false; }
          if (s.sendsEmail) {
            $('reset').hidden = false;
            if (s.signUp !== 'off') { $('signup').hidden = false; }
          }
        })();
        </script></body></html>
        """
}
